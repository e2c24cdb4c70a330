// A data node's own Prometheus series (beside prom-client's process defaults): the update path
// (updates received and forwarded by phase, the distributor's queue, in-flight requests, retries
// and final failures per destination, replicas marked down), leadership won and lost, recovery
// runs and progress, commit points, the persisted index and the update log per replica, and the
// coordination session. Gauges are read when scraped.
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import type { Coordinator } from '../coordination/index.js';
import type { CommandDistributor } from '../distrib/distributor.js';
import type { ShardReplica } from '../distrib/replica.js';

/** What the gauges read at scrape time. */
export interface NodeMetricsSource {
  replicas(): Iterable<ShardReplica>;
  readonly distributor: CommandDistributor;
  readonly coordinator: Coordinator;
}

export interface NodeMetrics {
  readonly received: Counter<'phase'>;
  readonly forwarded: Counter<'phase'>;
  readonly recoveries: Counter<'method'>;
  readonly distributorOutcomes: Counter<'dest' | 'outcome'>;
  readonly markedDown: Counter<'replica'>;
  readonly elections: Counter<'replica'>;
  readonly leadershipsLost: Counter<'replica'>;
  readonly handovers: Counter<'replica' | 'outcome'>;
  readonly recoveryDocs: Counter<'replica' | 'step'>;
  readonly commits: Counter<'replica'>;
  readonly segmentsWritten: Counter<'replica'>;
  readonly indexOpens: Counter<'method'>;
}

export function nodeMetrics(registry: Registry, source: NodeMetricsSource): NodeMetrics {
  const registers = [registry];
  /** A series with one sample per replica this node holds, read from it at each scrape: a gauge, or a counter the replica keeps. */
  const perReplica = (type: 'gauge' | 'counter', name: string, help: string, value: (r: ShardReplica) => number): void => {
    const fill = (m: Gauge<'replica'> | Counter<'replica'>): void => {
      m.reset();
      for (const r of source.replicas()) {
        if (m instanceof Gauge) m.set({ replica: r.key }, value(r));
        else m.inc({ replica: r.key }, value(r));
      }
    };
    const config = { name, help, labelNames: ['replica'] as const, registers };
    if (type === 'gauge') {
      new Gauge({
        ...config,
        collect() {
          fill(this);
        },
      });
    } else {
      new Counter({
        ...config,
        collect() {
          fill(this);
        },
      });
    }
  };
  new Gauge({
    name: 'shardex_distributor_queued',
    help: 'Updates waiting in the distributor (buffered, waiting for a slot, or pausing before a retry)',
    registers,
    collect() {
      this.set(source.distributor.queued);
    },
  });
  new Gauge({
    name: 'shardex_distributor_in_flight',
    help: 'Update frames the distributor has in flight to other nodes',
    registers,
    collect() {
      this.set(source.distributor.stats.inFlight);
    },
  });
  perReplica('gauge', 'shardex_replica_leader', 'Whether this node leads the replica (1) or not (0)', (r) => (r.role === 'leader' ? 1 : 0));
  perReplica('gauge', 'shardex_replica_recovering', 'Whether the replica is recovering or catching up (1) or not (0)', (r) => (r.recovering || r.catchingUp ? 1 : 0));
  perReplica('gauge', 'shardex_replica_docs', 'Live documents of the replica', (r) => r.store.docCount);
  perReplica('gauge', 'shardex_update_log_entries', "Entries in the replica's update log", (r) => r.store.logSize);
  perReplica('gauge', 'shardex_replica_max_version', 'Newest version the replica holds', (r) => r.store.maxVersion);
  perReplica('counter', 'shardex_doc_cache_hits_total', "Ids of pages of hits the replica's document cache answered", (r) => r.store.docCacheStats.hits);
  perReplica('counter', 'shardex_doc_cache_misses_total', "Ids of pages of hits read from the replica's store (then cached)", (r) => r.store.docCacheStats.misses);
  new Gauge({
    name: 'shardex_coordination_connected',
    help: 'Whether the coordination session (ZooKeeper) is usable for leadership (1) or not (0)',
    registers,
    collect() {
      this.set(source.coordinator.canActAsLeader() ? 1 : 0);
    },
  });
  const sessionEvents = new Counter({
    name: 'shardex_coordination_session_events_total',
    help: 'Changes of the coordination (ZooKeeper) session, by the state entered: connected, disconnected, expired',
    labelNames: ['state'],
    registers,
  });
  source.coordinator.onSessionState((state) => sessionEvents.inc({ state }));
  return {
    received: new Counter({
      name: 'shardex_updates_received_total',
      help: 'Update ops this node received, by phase (NONE from clients, TOLEADER forwarded to it as a leader, FROMLEADER from its leaders)',
      labelNames: ['phase'],
      registers,
    }),
    forwarded: new Counter({ name: 'shardex_updates_forwarded_total', help: 'Update ops this node sent on to another node, by phase', labelNames: ['phase'], registers }),
    recoveries: new Counter({ name: 'shardex_recoveries_total', help: 'Replica recoveries completed on this node, by method (peer-sync or full-copy)', labelNames: ['method'], registers }),
    distributorOutcomes: new Counter({
      name: 'shardex_distributor_requests_total',
      help: 'Update frames sent to each destination, retries scheduled, and final failures (outcome sent, retried, failed)',
      labelNames: ['dest', 'outcome'],
      registers,
    }),
    markedDown: new Counter({ name: 'shardex_replicas_marked_down_total', help: 'Replicas this node, as leader, marked down because they missed an update', labelNames: ['replica'], registers }),
    elections: new Counter({ name: 'shardex_leader_elections_total', help: 'Times this node was elected leader of a replica', labelNames: ['replica'], registers }),
    leadershipsLost: new Counter({ name: 'shardex_leaderships_lost_total', help: 'Times this node stopped leading a replica (deposed, resigned, or its session lost)', labelNames: ['replica'], registers }),
    handovers: new Counter({
      name: 'shardex_leader_handovers_total',
      help: 'Leader balance: handovers this node tried as leader, by replica and outcome (handed-over; target-unfit, writes-pending: it kept leading and tries again later; lost: its leadership ended meanwhile)',
      labelNames: ['replica', 'outcome'],
      registers,
    }),
    recoveryDocs: new Counter({
      name: 'shardex_recovery_docs_total',
      help: "Documents recoveries stored on this node, by replica and step (copied: a full copy's documents; applied: log entries of a peer sync): a recovery's progress",
      labelNames: ['replica', 'step'],
      registers,
    }),
    commits: new Counter({ name: 'shardex_commit_points_total', help: 'Commit points recorded (what eventual reads see)', labelNames: ['replica'], registers }),
    segmentsWritten: new Counter({ name: 'shardex_index_segments_written_total', help: 'Index segment files written', labelNames: ['replica'], registers }),
    indexOpens: new Counter({ name: 'shardex_index_opens_total', help: 'Replica indexes opened, by method (loaded from the segment, or rebuilt)', labelNames: ['method'], registers }),
  };
}

/** The HTTP API's series, by route pattern (never the raw URL: ids and names would make a series each), method and status. */
export interface HttpMetrics {
  readonly requests: Counter<'method' | 'route' | 'status_code'>;
  readonly duration: Histogram<'method' | 'route' | 'status_code'>;
}

const HTTP_LABELS = ['method', 'route', 'status_code'] as const;

/** The HTTP series in `registry`, made on first use (a node may build more than one HTTP app: tests inject into a second). */
export function httpMetrics(registry: Registry): HttpMetrics {
  const requestsName = 'shardex_http_requests_total';
  const durationName = 'shardex_http_request_duration_seconds';
  const requests =
    (registry.getSingleMetric(requestsName) as Counter<'method' | 'route' | 'status_code'> | undefined) ??
    new Counter({ name: requestsName, help: 'HTTP requests answered, by method, route pattern and status code', labelNames: HTTP_LABELS, registers: [registry] });
  const duration =
    (registry.getSingleMetric(durationName) as Histogram<'method' | 'route' | 'status_code'> | undefined) ??
    new Histogram({
      name: durationName,
      help: 'Time from receiving an HTTP request to answering it, in seconds, by method, route pattern and status code',
      labelNames: HTTP_LABELS,
      buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
      registers: [registry],
    });
  return { requests, duration };
}
