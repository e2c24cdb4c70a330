// /api/read-balance and /api/read-slots: the read balancer's settings (Prostore's SET, GET and
// ERASE_READ_BALANCE), stored in coordination and applied live by every node, and this node's
// slot counters (CHECK_READ_SLOTS, RESET_READ_SLOTS).
import type { FastifyPluginAsync, FastifyReply } from 'fastify';
import { ShardexError } from '../../errors.js';
import { PriorityName, TargetName, filterSettings, parseFilter, parseSetting } from '../../read/balance-settings.js';

// One reason for every ended response: AbortController.abort() without one builds a
// DOMException (and its stack) per call.
const RESPONSE_ENDED = new Error('the response ended or its client went away');

/**
 * Makes, on demand, a signal that fires when the response has ended, sent or not (its client
 * went away): a balanced read holds its slots until then.
 */
export function responseEnd(reply: FastifyReply): () => AbortSignal {
  return () => {
    const ended = new AbortController();
    const res = reply.raw;
    if (res.closed) ended.abort(RESPONSE_ENDED);
    else res.once('close', () => ended.abort(RESPONSE_ENDED));
    return ended.signal;
  };
}

function checkName(what: 'priority' | 'target', value: string): string {
  const schema = what === 'priority' ? PriorityName : TargetName;
  if (!schema.safeParse(value).success) {
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
