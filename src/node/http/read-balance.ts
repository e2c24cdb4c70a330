// /api/read-balance and /api/read-slots: the read balancer's settings (Prostore's SET, GET and
// ERASE_READ_BALANCE), stored in coordination and applied live by every node, and this node's
// slot counters (CHECK_READ_SLOTS, RESET_READ_SLOTS).
import type { ServerResponse } from 'node:http';
import type { FastifyPluginAsync, FastifyReply } from 'fastify';
import { ShardexError } from '../../errors.js';
import { filterSettings, isBalanceName, parseFilter, parseSetting } from '../../read/balance-settings.js';
import type { CancelSignal } from '../../read/balancer-runtime.js';

// One reason for every ended response: building an Error (and its stack) per response costs.
const RESPONSE_ENDED = new Error('the response ended or its client went away');

/**
 * A response's end as a CancelSignal: it fires once, when the response has ended, sent or not
 * (its client went away). Lighter than an AbortController (no EventTarget, no Event, no
 * DOMException): one 'close' listener on the response and a short list of the runtime's.
 */
class ResponseEnd implements CancelSignal {
  aborted = false;
  readonly reason = RESPONSE_ENDED;
  private listeners: Array<() => void> = [];

  constructor(res: ServerResponse) {
    // 'close' comes once per response, so `on` (no once-wrapper) is enough.
    if (res.closed) this.aborted = true;
    else res.on('close', this.fire);
  }

  private readonly fire = (): void => {
    this.aborted = true;
    const listeners = this.listeners;
    this.listeners = [];
    for (const l of listeners) l();
  };

  addEventListener(_type: 'abort', listener: () => void): void {
    // As with an AbortSignal: a listener added after the end is never called.
    if (!this.aborted) this.listeners.push(listener);
  }

  removeEventListener(_type: 'abort', listener: () => void): void {
    const i = this.listeners.indexOf(listener);
    if (i >= 0) this.listeners.splice(i, 1);
  }
}

/**
 * Makes, on demand, a signal that fires when the response has ended, sent or not (its client
 * went away): a balanced read holds its slots until then. Unbalanced reads never call it.
 */
export function responseEnd(reply: FastifyReply): () => CancelSignal {
  return () => new ResponseEnd(reply.raw);
}

function checkName(what: 'priority' | 'target', value: string): string {
  if (!isBalanceName(value)) {
    throw new ShardexError('SHX_BAD_REQUEST', `${what} must be a name matching [A-Za-z0-9_.-]{1,64}, got ${JSON.stringify(value)}`);
  }
  return value;
}

export const readBalanceRoutes: FastifyPluginAsync = async (app) => {
  // Same (priority, target) updates, else adds.
  app.put<{ Params: { priority: string; target: string } }>('/api/read-balance/:priority/:target', { config: { access: 'admin' } }, async (req) => {
    const setting = parseSetting(req.params.priority, req.params.target, req.body);
    await app.shardex.putReadBalance(setting);
    return { setting };
  });

  // An unknown priority or target matches nothing: an empty list, not an error.
  app.get('/api/read-balance', { config: { access: 'admin' } }, async (req) => {
    const filter = parseFilter(req.query);
    return { settings: filterSettings(await app.shardex.readBalanceSettings(), filter) };
  });

  const erase = async (priority: string, target?: string): Promise<{ removed: number }> => {
    checkName('priority', priority);
    if (target !== undefined) checkName('target', target);
    const { removed } = await app.shardex.eraseReadBalance(priority, target);
    if (removed === 0) {
      const what = target === undefined ? `priority "${priority}"` : `"${priority}" on target "${target}"`;
      throw new ShardexError('SHX_NOT_FOUND', `there is no read-balance setting for ${what}; GET /api/read-balance lists them`);
    }
    return { removed };
  };
  app.delete<{ Params: { priority: string; target: string } }>('/api/read-balance/:priority/:target', { config: { access: 'admin' } }, async (req) => erase(req.params.priority, req.params.target));
  app.delete<{ Params: { priority: string } }>('/api/read-balance/:priority', { config: { access: 'admin' } }, async (req) => erase(req.params.priority));

  app.get('/api/read-slots', { config: { access: 'admin' } }, async () => ({ node: app.shardex.name, slots: app.shardex.readSlots() }));
  // Zeroes the counters; running reads keep running, and what they give back later frees nothing.
  app.post('/api/read-slots/reset', { config: { access: 'admin' } }, async () => ({ node: app.shardex.name, reset: true, slots: app.shardex.resetReadSlots() }));
};
