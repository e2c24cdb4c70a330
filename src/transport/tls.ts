// TLS from PEM files, for the HTTP and gRPC servers of nodes and readers and for their gRPC
// clients. Everything is read and checked once, at start, so that a wrong file stops the process
// with a message naming the flag (and what to do) instead of failing every handshake later.
import { X509Certificate, createPrivateKey, type KeyObject } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { isIP } from 'node:net';
import { ShardexError } from '../errors.js';

/** A process's TLS: its certificate (chain) and key; with `ca`, peers must present a certificate issued by it (mutual TLS). */
export interface TlsMaterial {
  /** PEM certificate chain, the leaf first. */
  readonly cert: Buffer;
  /** PEM private key of the leaf. */
  readonly key: Buffer;
  /** PEM CA certificate(s): servers verify client certificates against them, clients the server's. */
  readonly ca?: Buffer;
}

/** What a TLS client is given: the CAs it trusts (absent: the system's), and a certificate to present, if any. */
export interface ClientTlsMaterial {
  readonly ca?: Buffer;
  readonly cert?: Buffer;
  readonly key?: Buffer;
}

/** File paths of the TLS flags, and the flags' names for messages. */
export interface TlsFiles {
  readonly cert?: string;
  readonly key?: string;
  readonly ca?: string;
}
export interface TlsFlagNames {
  readonly cert: string;
  readonly key: string;
  readonly ca: string;
}

export const SERVER_TLS_FLAGS: TlsFlagNames = { cert: '--tls-cert', key: '--tls-key', ca: '--tls-ca' };

const BAD = (message: string): ShardexError => new ShardexError('SHX_BAD_CONFIG', message);

async function readPem(file: string, flag: string, what: string): Promise<Buffer> {
  if (file === '') throw BAD(`${flag} is empty: give the path of the PEM ${what} file, or leave it unset`);
  let pem: Buffer;
  try {
    pem = await readFile(file);
  } catch (err) {
    throw BAD(`cannot read the ${what} file ${file} (${flag}): ${(err as Error).message}; give the path of a PEM file`);
  }
  return pem;
}

/** Every certificate of a PEM text, parsed; SHX_BAD_CONFIG naming the file and flag when it holds none or a bad one. */
function certificates(pem: Buffer, file: string, flag: string): X509Certificate[] {
  const blocks = pem.toString('latin1').match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g) ?? [];
  if (blocks.length === 0) throw BAD(`${file} (${flag}) holds no PEM certificate ("-----BEGIN CERTIFICATE-----"); give the certificate in PEM form (openssl x509 -in CERT -outform PEM)`);
  return blocks.map((block, i) => {
    try {
      return new X509Certificate(block);
    } catch (err) {
      throw BAD(`certificate ${i + 1} in ${file} (${flag}) cannot be parsed: ${(err as Error).message}`);
    }
  });
}

function privateKey(pem: Buffer, file: string, flag: string): KeyObject {
  try {
    return createPrivateKey(pem);
  } catch (err) {
    throw BAD(`${file} (${flag}) holds no usable private key: ${(err as Error).message}; give the unencrypted PEM key of the certificate`);
  }
}

/**
 * Reads and checks a certificate, its key and (optionally) a CA: the files are readable PEM, the
 * key is the certificate's, and the certificate is issued by the CA (else peers would refuse it).
 * Nothing given: undefined. `names` are the flags, for the messages.
 */
export async function loadTls(files: TlsFiles, names: TlsFlagNames = SERVER_TLS_FLAGS): Promise<TlsMaterial | undefined> {
  const { cert: certFile, key: keyFile, ca: caFile } = files;
  if (certFile === undefined && keyFile === undefined) {
    if (caFile !== undefined) throw BAD(`${names.ca} needs ${names.cert} and ${names.key}: mutual TLS means this process presents a certificate too`);
    return undefined;
  }
  if (certFile === undefined || keyFile === undefined) {
    throw BAD(`${certFile === undefined ? names.key : names.cert} needs ${certFile === undefined ? names.cert : names.key}: give both the PEM certificate and its private key`);
  }
  const [cert, key, ca] = await Promise.all([
    readPem(certFile, names.cert, 'certificate'),
    readPem(keyFile, names.key, 'private key'),
    caFile === undefined ? undefined : readPem(caFile, names.ca, 'CA certificate'),
  ]);
  const chain = certificates(cert, certFile, names.cert);
  const leaf = chain[0]!;
  if (!leaf.checkPrivateKey(privateKey(key, keyFile, names.key))) {
    throw BAD(`the private key in ${keyFile} (${names.key}) is not the key of the certificate in ${certFile} (${names.cert}); give the key the certificate was made for`);
  }
  if (ca !== undefined) {
    const roots = certificates(ca, caFile!, names.ca);
    const issued = chain.some((c) => roots.some((r) => c.checkIssued(r) && c.verify(r.publicKey)));
    if (!issued) {
      throw BAD(
        `the certificate in ${certFile} (${names.cert}) is not issued by a CA in ${caFile} (${names.ca}): peers checking against that CA would refuse it; give every node and reader certificates from the same CA`,
      );
    }
  }
  return { cert, key, ...(ca !== undefined && { ca }) };
}

/** SHX_BAD_CONFIG unless the certificate is valid for `host` (DNS name or IP address): clients verify the name they connect to. */
export function checkCertificateHost(tls: TlsMaterial, host: string, certFlag: string, hostFlag: string): void {
  const leaf = new X509Certificate(tls.cert);
  const h = host.startsWith('[') && host.endsWith(']') ? host.slice(1, -1) : host;
  const ok = isIP(h) ? leaf.checkIP(h) !== undefined : leaf.checkHost(h) !== undefined;
  if (!ok) {
    throw BAD(
      `the certificate of ${certFlag} is not valid for ${hostFlag} ${host} (its names: ${leaf.subjectAltName ?? leaf.subject}): peers and clients connecting to ${host} would refuse it; make a certificate with subjectAltName ${isIP(h) ? 'IP' : 'DNS'}:${h}, or advertise a name it has`,
    );
  }
}

/**
 * Reads the PEM files a client is given (`--ca`, `--cert`, `--key`); SHX_BAD_CONFIG naming the
 * flag. The CA is the one the client trusts for servers: its own certificate may come from another.
 */
export async function loadClientTls(files: TlsFiles, names: TlsFlagNames): Promise<ClientTlsMaterial | undefined> {
  const own = files.cert === undefined && files.key === undefined ? undefined : await loadTls({ ...(files.cert !== undefined && { cert: files.cert }), ...(files.key !== undefined && { key: files.key }) }, names);
  let ca: Buffer | undefined;
  if (files.ca !== undefined) {
    ca = await readPem(files.ca, names.ca, 'CA certificate');
    certificates(ca, files.ca, names.ca);
  }
  if (own === undefined && ca === undefined) return undefined;
  return { ...own, ...(ca !== undefined && { ca }) };
}
