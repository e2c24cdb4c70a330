// Read-balance settings as operators and coordination see them: the zod schemas of a setting,
// of the PUT /api/read-balance/:priority/:target body and of the stored document
// (/config/read_balance), and pure helpers for Prostore's SET/GET/ERASE_READ_BALANCE:
// same (priority, target) updates, else adds; a filter naming an unknown priority or target
// gives an empty list, not an error.
import { z } from 'zod';
import { ShardexError } from '../errors.js';
import type { BalanceSetting } from './balancer.js';

/** The coordination config name (Coordinator.getConfig/setConfig) holding the settings. */
export const READ_BALANCE_CONFIG = 'read_balance';

// Names travel in URL paths and Prometheus labels: keep them to a safe, short alphabet.
const NAME = /^[A-Za-z0-9_.-]{1,64}$/;

export const PriorityName = z.string().regex(NAME, 'a priority name must match [A-Za-z0-9_.-]{1,64}');

/** PriorityName's and TargetName's check without zod: every read's `priority=` passes through it. */
export function isBalanceName(value: unknown): value is string {
  return typeof value === 'string' && NAME.test(value);
}
/** A reader group name or `primary` (the shard leaders). */
export const TargetName = z.string().regex(NAME, 'a target name must match [A-Za-z0-9_.-]{1,64}');

export const MAX_WEIGHT = 1_000_000;
export const MAX_SLOTS = 100_000;

export const BalanceWeight = z.number().int().min(0).max(MAX_WEIGHT);
/** 0 is allowed: the target stays configured but admits nothing (its requests wait or go elsewhere). */
export const BalanceSlots = z.number().int().min(0).max(MAX_SLOTS);

export const BalanceSettingSchema = z
  .object({ priority: PriorityName, target: TargetName, weight: BalanceWeight, slots: BalanceSlots })
  .strict();

/** Body of PUT /api/read-balance/:priority/:target. */
export const PutBalanceBody = z.object({ weight: BalanceWeight, slots: BalanceSlots }).strict();

/** Query of GET /api/read-balance: any string is accepted, an unknown one just matches nothing. */
export const BalanceFilterQuery = z.object({ priority: z.string().optional(), target: z.string().optional() }).strict();
export type BalanceFilter = z.infer<typeof BalanceFilterQuery>;

/** The stored document; absent = no settings. */
export const StoredBalanceSettings = z
  .object({ settings: z.array(BalanceSettingSchema) })
  .strict()
  .superRefine((doc, ctx) => {
    const seen = new Set<string>();
    for (const [i, s] of doc.settings.entries()) {
      const k = `${s.priority}/${s.target}`;
      if (seen.has(k)) ctx.addIssue({ code: 'custom', path: ['settings', i], message: `duplicate setting for ${k}` });
      seen.add(k);
    }
  });

function message(err: z.ZodError, what: string): string {
  return `${what}: ` + err.issues.map((i) => `${i.path.join('.') || '(body)'} ${i.message}`).join('; ');
}

/** The setting of a PUT, checked whole; a bad name or body is SHX_BAD_REQUEST naming the field. */
export function parseSetting(priority: string, target: string, body: unknown): BalanceSetting {
  const b = PutBalanceBody.safeParse(body);
  if (!b.success) throw new ShardexError('SHX_BAD_REQUEST', message(b.error, 'bad read-balance setting'));
  const parsed = BalanceSettingSchema.safeParse({ priority, target, ...b.data });
  if (!parsed.success) throw new ShardexError('SHX_BAD_REQUEST', message(parsed.error, 'bad read-balance setting'));
  return parsed.data;
}

export function parseFilter(query: unknown): BalanceFilter {
  const parsed = BalanceFilterQuery.safeParse(query ?? {});
  if (!parsed.success) throw new ShardexError('SHX_BAD_REQUEST', message(parsed.error, 'bad read-balance filter'));
  return parsed.data;
}

/** Reads the stored document; a corrupt one is SHX_BAD_CONFIG (the node keeps its last good settings). */
export function parseStoredSettings(doc: unknown): BalanceSetting[] {
  if (doc === undefined || doc === null) return [];
  const parsed = StoredBalanceSettings.safeParse(doc);
  if (!parsed.success) throw new ShardexError('SHX_BAD_CONFIG', message(parsed.error, `bad /config/${READ_BALANCE_CONFIG}`));
  return sortSettings(parsed.data.settings);
}

export function storedSettings(settings: readonly BalanceSetting[]): z.infer<typeof StoredBalanceSettings> {
  return { settings: sortSettings(settings) };
}

/** Same (priority, target) -> replaced, else added. */
export function upsertSetting(settings: readonly BalanceSetting[], s: BalanceSetting): BalanceSetting[] {
  return sortSettings([...settings.filter((o) => !same(o, s.priority, s.target)), s]);
}

/** Removes one setting, or every setting of the priority when `target` is absent. */
export function eraseSettings(settings: readonly BalanceSetting[], priority: string, target?: string): { settings: BalanceSetting[]; removed: number } {
  const kept = settings.filter((o) => o.priority !== priority || (target !== undefined && o.target !== target));
  return { settings: sortSettings(kept), removed: settings.length - kept.length };
}

export function filterSettings(settings: readonly BalanceSetting[], filter: BalanceFilter = {}): BalanceSetting[] {
  return sortSettings(settings.filter((s) => (filter.priority === undefined || s.priority === filter.priority) && (filter.target === undefined || s.target === filter.target)));
}

/** Stable output for GET and for the stored document: by priority, then target. */
export function sortSettings(settings: readonly BalanceSetting[]): BalanceSetting[] {
  return [...settings]
    .map((s) => ({ priority: s.priority, target: s.target, weight: s.weight, slots: s.slots }))
    .sort((a, b) => cmp(a.priority, b.priority) || cmp(a.target, b.target));
}

function same(s: BalanceSetting, priority: string, target: string): boolean {
  return s.priority === priority && s.target === target;
}

function cmp(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
