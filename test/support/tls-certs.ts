// Certificates for the TLS tests, made with openssl in a temp dir by the test itself: a CA, and
// leaf certificates it issues for 127.0.0.1 and localhost (usable as server and as client
// certificates). EC P-256 keys: quick to make. Random serials (not -CAcreateserial, whose serial
// file certificates issued at once would race on).
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);
const OPENSSL = '/usr/bin/openssl';
const EC = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];

/** One certificate and its key: the file paths and their PEM text. */
export interface CertFiles {
  readonly certFile: string;
  readonly keyFile: string;
  readonly cert: Buffer;
  readonly key: Buffer;
}

export interface TestCa extends CertFiles {
  /** A leaf certificate issued by this CA, valid for IP:127.0.0.1 and DNS:localhost (and `names`), for servers and clients. */
  issue(name: string, names?: readonly string[]): Promise<CertFiles>;
}

export interface TestPki {
  readonly dir: string;
  /** Makes a new self-signed CA named `name`. */
  ca(name: string): Promise<TestCa>;
  remove(): Promise<void>;
}

async function files(certFile: string, keyFile: string): Promise<CertFiles> {
  const [cert, key] = await Promise.all([readFile(certFile), readFile(keyFile)]);
  return { certFile, keyFile, cert, key };
}

/** A temp dir to make CAs and certificates in; `remove()` deletes it. */
export async function testPki(): Promise<TestPki> {
  const dir = await mkdtemp(join(tmpdir(), 'shardex-tls-'));
  return {
    dir,
    remove: () => rm(dir, { recursive: true, force: true }),
    async ca(caName) {
      const caKey = join(dir, `${caName}.key`);
      const caCert = join(dir, `${caName}.crt`);
      await run(OPENSSL, [
        'req', '-x509', ...EC, '-keyout', caKey, '-out', caCert, '-days', '2', '-subj', `/CN=${caName}`,
        '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign',
      ]);
      const ca = await files(caCert, caKey);
      return {
        ...ca,
        async issue(name, names = []) {
          const base = join(dir, `${caName}-${name}`);
          const ext = `${base}.ext`;
          const san = ['IP:127.0.0.1', 'DNS:localhost', ...names].join(',');
          await writeFile(ext, `subjectAltName=${san}\nextendedKeyUsage=serverAuth,clientAuth\nkeyUsage=critical,digitalSignature\n`);
          await run(OPENSSL, ['req', ...EC, '-keyout', `${base}.key`, '-out', `${base}.csr`, '-subj', `/CN=${name}`]);
          await run(OPENSSL, ['x509', '-req', '-in', `${base}.csr`, '-CA', caCert, '-CAkey', caKey, '-set_serial', `0x${randomBytes(8).toString('hex')}`, '-out', `${base}.crt`, '-days', '2', '-extfile', ext]);
          return files(`${base}.crt`, `${base}.key`);
        },
      };
    },
  };
}
