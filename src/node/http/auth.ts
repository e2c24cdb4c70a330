// API keys and roles (issue 13): `Authorization: Bearer KEY`, checked once per request before
// anything else runs. Keys are kept only as SHA-256 digests (the keys file holds nothing that
// would let a reader call the API), compared in constant time, and never logged. Each route
// declares the access it needs in its fastify config (`config: { access: 'read' }`); a route
// that declares none needs `admin`, so that a new endpoint is closed until someone opens it.
// One guard for every HTTP API of the cluster: a data node's and a snapshot reader's.
import { createHash, timingSafeEqual } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { z } from 'zod';
import { ShardexError } from '../../errors.js';

export const ROLES = ['read', 'write', 'admin'] as const;
export type Role = (typeof ROLES)[number];

/**
 * What a route needs: a role, `any` valid key (the cluster view every client routes with),
 * or nothing at all (`public`: the health checks load balancers and orchestrators poll).
 */
export type Access = Role | 'any' | 'public';

declare module 'fastify' {
  interface FastifyContextConfig {
    access?: Access;
  }
}

/** One entry of the keys file: who, the SHA-256 of the key in hex, and the roles it grants. */
export interface ApiKey {
  readonly name: string;
  readonly sha256: string;
  readonly roles: readonly Role[];
}

const ApiKeyEntry = z
  .object({
    name: z.string().min(1).max(128),
    sha256: z
      .string()
      .regex(/^[0-9a-fA-F]{64}$/, 'must be the SHA-256 of the key as 64 hex digits (printf %s "$KEY" | sha256sum), not the key itself')
      .transform((h) => h.toLowerCase()),
    roles: z.array(z.enum(ROLES)).min(1, 'must list at least one of read, write, admin'),
  })
  .strict();

const ApiKeysFile = z.array(ApiKeyEntry).min(1, 'lists no keys; give at least one, or leave out --api-keys to run without authentication');

/** Validates the keys file's content; SHX_BAD_CONFIG naming the file, the entry and what is wrong. */
export function parseApiKeys(json: unknown, source: string): ApiKey[] {
  const parsed = ApiKeysFile.safeParse(json);
  if (!parsed.success) {
    const problems = parsed.error.issues.map((i) => `${i.path.length > 0 ? `entry ${i.path.join('.')}` : 'the file'}: ${i.message}`);
    throw new ShardexError(
      'SHX_BAD_CONFIG',
      `API keys file ${source} (--api-keys) is not a JSON array of {"name", "sha256", "roles"}: ${problems.join('; ')}`,
    );
  }
  const keys = parsed.data;
  const seen = new Map<string, string>();
  const names = new Set<string>();
  for (const k of keys) {
    if (names.has(k.name)) throw new ShardexError('SHX_BAD_CONFIG', `API keys file ${source} (--api-keys) names "${k.name}" twice; give every key its own name`);
    names.add(k.name);
    const other = seen.get(k.sha256);
    if (other !== undefined) throw new ShardexError('SHX_BAD_CONFIG', `API keys file ${source} (--api-keys): "${other}" and "${k.name}" have the same sha256 (the same key); give each its own key`);
    seen.set(k.sha256, k.name);
  }
  return keys;
}

/** Reads and validates `--api-keys FILE`. */
export async function loadApiKeys(file: string): Promise<ApiKey[]> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (err) {
    throw new ShardexError('SHX_BAD_CONFIG', `cannot read the API keys file ${file} (--api-keys): ${(err as Error).message}`);
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (err) {
    // The parser's message quotes the text near the error: that could be a secret someone
    // pasted into the wrong file, so only the fact is reported.
    throw new ShardexError('SHX_BAD_CONFIG', `API keys file ${file} (--api-keys) is not valid JSON (${(err as Error).name}); it must be a JSON array of {"name", "sha256", "roles"}`);
  }
  return parseApiKeys(json, file);
}

/** The SHA-256 of a key, as the keys file holds it. */
export function keyDigest(key: string): Buffer {
  return createHash('sha256').update(key, 'utf8').digest();
}

interface StoredKey {
  readonly name: string;
  readonly digest: Buffer;
  readonly roles: ReadonlySet<Role>;
}

/** A presented key's holder: its name (for logs) and roles. */
export interface Caller {
  readonly name: string;
  readonly roles: ReadonlySet<Role>;
}

/** pino's redaction of the Authorization header: nothing logs headers, and should anything ever, the key stays out. */
export const AUTHORIZATION_REDACTION = { paths: ['req.headers.authorization', 'headers.authorization'], censor: '[redacted]' };

const BEARER = /^Bearer[ \t]+(\S+)[ \t]*$/i;

/** The configured keys, by digest. */
export class ApiKeyRing {
  private readonly keys: readonly StoredKey[];

  constructor(keys: readonly ApiKey[]) {
    this.keys = keys.map((k) => ({ name: k.name, digest: Buffer.from(k.sha256, 'hex'), roles: new Set(k.roles) }));
  }

  get size(): number {
    return this.keys.length;
  }

  /**
   * The holder of the key in an `Authorization` header, or undefined. Every stored digest is
   * compared, in constant time, whichever matches: how long this takes says nothing about
   * the key or about which entry it is.
   */
  authenticate(authorization: string | undefined): Caller | undefined {
    if (authorization === undefined) return undefined;
    const m = BEARER.exec(authorization);
    if (!m) return undefined;
    const digest = keyDigest(m[1]!);
    let found: StoredKey | undefined;
    for (const k of this.keys) {
      if (timingSafeEqual(k.digest, digest) && found === undefined) found = k;
    }
    return found;
  }
}

const CHALLENGE = 'Bearer realm="shardex"';

/** What the caller of `req` may not do, or undefined when it may (`access` from the route). */
export function authProblem(ring: ApiKeyRing, access: Access, authorization: string | undefined): ShardexError | undefined {
  if (access === 'public') return undefined;
  const caller = ring.authenticate(authorization);
  if (!caller) {
    const what = authorization === undefined ? 'this node requires an API key' : 'the API key is not valid (or the Authorization header is not "Bearer KEY")';
    return new ShardexError('SHX_UNAUTHORIZED', `${what}: send "Authorization: Bearer KEY" with a key of the node's --api-keys file (the CLI takes --api-key or SHARDEX_API_KEY); nothing was done`);
  }
  if (access === 'any' || caller.roles.has(access)) return undefined;
  return new ShardexError('SHX_FORBIDDEN', `API key "${caller.name}" does not have the ${access} role this endpoint needs (it has ${[...caller.roles].join(', ')}); nothing was done`);
}

/**
 * Who may read over gRPC without the cluster secret (a smart client's get or search, sent to a
 * reader or a leader): with API keys, the holder of a key with the `read` role, as on HTTP; without
 * keys, anyone, as the HTTP API is open then.
 */
export function readAccessOf(apiKeys: readonly ApiKey[] | undefined): (authorization: string | undefined) => ShardexError | undefined {
  if (apiKeys === undefined) return () => undefined;
  const ring = new ApiKeyRing(apiKeys);
  return (authorization) => authProblem(ring, 'read', authorization);
}

/**
 * The onRequest hook: 401 (with the Bearer challenge) without a valid key, 403 without the
 * route's role. A request for no route needs a valid key too, so that 404s tell an anonymous
 * caller nothing about which paths exist.
 */
export function authenticateRequests(ring: ApiKeyRing) {
  return async (req: FastifyRequest, reply: FastifyReply): Promise<void> => {
    const access: Access = req.is404 ? 'any' : (req.routeOptions.config.access ?? 'admin');
    const problem = authProblem(ring, access, req.headers.authorization);
    if (!problem) return;
    void reply.header('www-authenticate', problem.code === 'SHX_UNAUTHORIZED' ? CHALLENGE : `${CHALLENGE}, error="insufficient_scope"`);
    throw problem;
  };
}

/** A route and the access it needs. */
export interface RouteAccess {
  readonly method: string;
  readonly url: string;
  readonly access: Access;
}

/**
 * Guards `app` (a node's or a reader's API): every route added after this must declare its
 * access (one that does not is refused as it is added), and with `apiKeys` every request is
 * authenticated (`authenticateRequests`). Returns the routes and their access, as they are added.
 */
export function guardRoutes(app: FastifyInstance, apiKeys: readonly ApiKey[] | undefined): readonly RouteAccess[] {
  if (apiKeys !== undefined) {
    const ring = new ApiKeyRing(apiKeys);
    app.addHook('onRequest', authenticateRequests(ring));
    app.log.info({ keys: ring.size }, 'API keys required');
  } else {
    app.log.info('no API keys configured: the HTTP API is open to anyone who can reach it');
  }
  const routes: RouteAccess[] = [];
  app.addHook('onRoute', (route) => {
    const access = route.config?.access;
    if (access === undefined) throw new Error(`route ${String(route.method)} ${route.url} declares no config.access (see src/node/http/auth.ts)`);
    for (const method of [route.method].flat()) if (method !== 'HEAD') routes.push({ method, url: route.url, access });
  });
  return routes;
}
