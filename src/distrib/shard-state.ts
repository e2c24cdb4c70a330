// The state of one shard replica as a pure machine, in the manner of etcd's raft `Step`/`Ready`:
// `step(state, event)` returns the next state and the effects the caller must perform (persist the
// fence, announce an epoch, sync from peers, mark replicas down, recover, resign, reply). No I/O,
// no timers, no globals: ShardReplica and the update processor are the shell that performs them.
//
// What it keeps:
// - role: follower, candidate (elected, not yet accepting writes: it announces its epoch and syncs
//   from its peers first) or leader;
// - epoch: this replica's own leadership epoch while candidate or leader;
// - fence: the newest epoch seen from any leader (persisted with the data): updates of an older
//   epoch are refused, so a deposed leader can never get a write acknowledged;
// - clock: the newest version assigned or stored. Versions are epoch-major, epoch x 2^33 + a
//   counter, so a newer leadership's writes order above every older one whatever the clocks say;
// - health: active, recovering, or dirty (it applied a write whose fate it could not settle: as a
//   deposed leader, or when it could not mark missed replicas down). A dirty replica answers that
//   write with an indeterminate error and recovers from the new leader before it serves or leads;
// - handingOver: a leader that gives its leadership to a fitter replica (leader balance) refuses
//   new writes definitely while those it accepted finish, then leaves its election.

/** Versions are epoch x 2^33 + counter: 2^20 epochs and 2^33 versions per leadership stay below 2^53. */
export const EPOCH_UNIT = 2 ** 33;
export const MAX_EPOCH = 2 ** 20 - 1;

export function epochOf(version: number): number {
  return Math.floor(version / EPOCH_UNIT);
}

/** The first version a leader of `epoch` may assign. */
export function epochBase(epoch: number): number {
  return epoch * EPOCH_UNIT;
}

export type Role = 'follower' | 'candidate' | 'leader';
export type Health = 'active' | 'recovering' | 'dirty';

export interface ShardState {
  readonly role: Role;
  readonly epoch: number;
  readonly fence: number;
  readonly clock: number;
  readonly health: Health;
  /** A leader that is handing its leadership over: it accepts no new writes. */
  readonly handingOver: boolean;
}

export type RefusalCode = 'SHX_NOT_LEADER' | 'SHX_STALE_EPOCH' | 'SHX_INDETERMINATE' | 'SHX_UNAVAILABLE';

export type ShardEvent =
  /** The replica opened with this persisted fence and newest stored version. */
  | { readonly type: 'opened'; readonly fence: number; readonly maxVersion: number }
  /** Coordination elected this replica with `epoch`. */
  | { readonly type: 'elected'; readonly epoch: number }
  /** The candidate of `epoch` announced it and synced from its peers: it may accept writes. */
  | { readonly type: 'ready'; readonly epoch: number }
  /** Leadership ended (another leader, left the election, session expired). */
  | { readonly type: 'lost' }
  /** A client update of `count` ops reached this replica as leader (TOLEADER). */
  | { readonly type: 'update'; readonly count: number }
  /** An update or announcement from the leader of `epoch` (FROMLEADER). */
  | { readonly type: 'fromLeader'; readonly epoch: number }
  /** Versions stored from elsewhere (recovery, peer sync): the clock stays ahead of them. */
  | { readonly type: 'stored'; readonly maxVersion: number }
  /** The fan-out of an applied update: which replicas acknowledged, refused a stale epoch, or were unreachable. */
  | { readonly type: 'fannedOut'; readonly acked: readonly string[]; readonly stale: readonly string[]; readonly unreachable: readonly string[] }
  /** Missed replicas were marked down (terms raised), or that could not be recorded. */
  | { readonly type: 'markedDown'; readonly ok: boolean; readonly acked: number }
  | { readonly type: 'recoveryStarted' }
  | { readonly type: 'recoveryFinished' }
  /** Leader balance: stop accepting writes, to hand leadership over once those accepted have finished. */
  | { readonly type: 'handOver' }
  /** The handover did not happen (the other replica was not fit after all): accept writes again. */
  | { readonly type: 'handOverCancelled' };

export type ShardEffect =
  | { readonly type: 'persistFence'; readonly epoch: number }
  /** Tell every replica this epoch (an empty FROMLEADER) before accepting writes. */
  | { readonly type: 'announce'; readonly epoch: number }
  | { readonly type: 'syncFromPeers'; readonly epoch: number }
  | { readonly type: 'startAutoCommit' }
  | { readonly type: 'stopAutoCommit' }
  /** Raise the healthy replicas' terms above these and mark them down. */
  | { readonly type: 'markDown'; readonly nodes: readonly string[] }
  /** Leave the election and join it again (this leadership may not go on). */
  | { readonly type: 'resign'; readonly why: string }
  | { readonly type: 'recover' }
  /**
   * A new leadership began: once its leader is ready, take from it what it has that we lack (a
   * deposed leader's last writes may have reached it and not us), as Solr's new leader asks its
   * replicas to sync with it.
   */
  | { readonly type: 'catchUp'; readonly epoch: number }
  /** Answer the request: with versions (update accepted), or refused. */
  | { readonly type: 'accept'; readonly versions?: readonly number[] }
  | { readonly type: 'refuse'; readonly code: RefusalCode; readonly why: string }
  /** Acknowledge the update to the client with this many replicas counted (the leader included). */
  | { readonly type: 'acknowledge'; readonly rf: number };

export interface Step {
  readonly state: ShardState;
  readonly effects: readonly ShardEffect[];
}

export const INITIAL: ShardState = { role: 'follower', epoch: 0, fence: 0, clock: 0, health: 'active', handingOver: false };

const same = (state: ShardState, ...effects: ShardEffect[]): Step => ({ state, effects });

/** Where leadership ends, whatever the cause: back to follower, auto-commit stopped. */
function stepDown(s: ShardState, health: Health = s.health): ShardState {
  return { ...s, role: 'follower', epoch: 0, health, handingOver: false };
}

export function step(s: ShardState, e: ShardEvent): Step {
  switch (e.type) {
    case 'opened':
      return same({ ...s, fence: Math.max(s.fence, e.fence), clock: Math.max(s.clock, e.maxVersion) });

    case 'elected': {
      if (e.epoch < s.fence) {
        // Coordination handed out an epoch older than one this replica has seen: leading with it
        // would have our writes refused (or, worse, ordered below older ones).
        return same(s, { type: 'resign', why: `elected with epoch ${e.epoch}, older than the fence ${s.fence}` });
      }
      if (e.epoch > MAX_EPOCH) return same(s, { type: 'resign', why: `epoch ${e.epoch} exceeds ${MAX_EPOCH}` });
      const next: ShardState = { ...s, role: 'candidate', epoch: e.epoch, fence: e.epoch, handingOver: false };
      const effects: ShardEffect[] = [];
      if (e.epoch > s.fence) effects.push({ type: 'persistFence', epoch: e.epoch });
      effects.push({ type: 'announce', epoch: e.epoch }, { type: 'syncFromPeers', epoch: e.epoch });
      return { state: next, effects };
    }

    case 'ready':
      if (s.role !== 'candidate' || s.epoch !== e.epoch) return same(s);
      return same({ ...s, role: 'leader', clock: Math.max(s.clock, epochBase(e.epoch)), health: 'active' }, { type: 'startAutoCommit' });

    case 'lost':
      if (s.role === 'follower') return same(s);
      return same(stepDown(s), { type: 'stopAutoCommit' });

    case 'update': {
      if (s.role !== 'leader') {
        const why = s.role === 'candidate' ? 'is taking over leadership and does not accept writes yet' : 'is not the leader';
        return same(s, { type: 'refuse', code: 'SHX_NOT_LEADER', why });
      }
      // Refused before a version is given: nothing is applied anywhere, so the refusal is definite.
      if (s.handingOver) return same(s, { type: 'refuse', code: 'SHX_NOT_LEADER', why: 'is handing its leadership over and accepts no new writes' });
      const base = epochBase(s.epoch);
      const first = Math.max(s.clock + 1, base + 1);
      const last = first + e.count - 1;
      if (last - base >= EPOCH_UNIT) {
        // This leadership has used its version space: a new election gives a new epoch.
        return same(stepDown(s), { type: 'stopAutoCommit' }, { type: 'resign', why: 'the leadership used up its versions' }, { type: 'refuse', code: 'SHX_NOT_LEADER', why: 'is handing over leadership' });
      }
      const versions = new Array<number>(e.count);
      for (let i = 0; i < e.count; i++) versions[i] = first + i;
      return same({ ...s, clock: e.count > 0 ? last : s.clock }, { type: 'accept', versions });
    }

    case 'fromLeader': {
      if (e.epoch < s.fence) return same(s, { type: 'refuse', code: 'SHX_STALE_EPOCH', why: `carries leadership epoch ${e.epoch}, older than ${s.fence}` });
      const effects: ShardEffect[] = [];
      let next = s;
      if (e.epoch > s.fence) {
        next = { ...next, fence: e.epoch };
        effects.push({ type: 'persistFence', epoch: e.epoch });
      }
      if (s.role !== 'follower' && e.epoch > s.epoch) {
        // A newer leader exists: this one was deposed.
        next = stepDown(next);
        effects.push({ type: 'stopAutoCommit' });
      }
      if (e.epoch > s.fence) effects.push({ type: 'catchUp', epoch: e.epoch });
      effects.push({ type: 'accept' });
      return { state: next, effects };
    }

    case 'stored':
      return same(e.maxVersion > s.clock ? { ...s, clock: e.maxVersion } : s);

    case 'fannedOut': {
      if (e.stale.length > 0) {
        // A replica has seen a newer epoch: we were deposed after applying this update locally.
        // Nobody acknowledged it; whether it stands is for the new leader (convergent recovery).
        return same(
          stepDown(s, 'dirty'),
          { type: 'stopAutoCommit' },
          { type: 'resign', why: `deposed: ${e.stale.join(', ')} saw a newer leadership epoch` },
          { type: 'recover' },
          { type: 'refuse', code: 'SHX_INDETERMINATE', why: 'was deposed as leader while writing; the write may or may not stand' },
        );
      }
      if (s.role !== 'leader') {
        return same(stepDown(s, 'dirty'), { type: 'recover' }, { type: 'refuse', code: 'SHX_INDETERMINATE', why: 'lost leadership while writing; the write may or may not stand' });
      }
      if (e.unreachable.length > 0) return same(s, { type: 'markDown', nodes: e.unreachable });
      return same(s, { type: 'acknowledge', rf: 1 + e.acked.length });
    }

    case 'markedDown':
      if (e.ok && s.role === 'leader') return same(s, { type: 'acknowledge', rf: 1 + e.acked });
      // The missed replicas could not be marked down (coordination unreachable): they might lead
      // without this write, so this leadership may not go on with it.
      return same(
        stepDown(s, 'dirty'),
        { type: 'stopAutoCommit' },
        { type: 'resign', why: 'could not mark replicas that missed an update down' },
        { type: 'recover' },
        { type: 'refuse', code: 'SHX_INDETERMINATE', why: 'could not record that replicas missed the write; it may or may not stand' },
      );

    case 'recoveryStarted':
      return same(s.role === 'follower' ? { ...s, health: s.health === 'dirty' ? 'dirty' : 'recovering' } : s);

    case 'recoveryFinished':
      return same(s.role === 'follower' ? { ...s, health: 'active' } : s);

    case 'handOver':
      return same(s.role === 'leader' && s.health === 'active' ? { ...s, handingOver: true } : s);

    case 'handOverCancelled':
      return same(s.handingOver ? { ...s, handingOver: false } : s);
  }
}

/** May this replica stand for leadership? A dirty replica recovers first (when a peer can lead). */
export function mayStand(s: ShardState, otherActivePeers: number): boolean {
  if (s.health === 'recovering') return false;
  if (s.health === 'dirty') return otherActivePeers === 0;
  return true;
}
