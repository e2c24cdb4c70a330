// A strict parser of the Prometheus text exposition format (0.0.4), for tests of `/metrics`: what
// a Prometheus server would scrape, checked harder than a scraper does. Every family has one HELP
// and one TYPE line before its samples, and its samples are contiguous; every sample belongs to a
// declared family (histograms: `_bucket` with `le`, `_sum`, `_count`; summaries: the family with
// `quantile`, `_sum`, `_count`); names, label names, escapes and numbers follow the format's
// grammar; no series appears twice; counters are not negative; each histogram series has
// ascending `le` bounds ending at +Inf, cumulative counts, and +Inf equal to its `_count`. The npm
// parsers looked at (parse-prometheus-text-format) accept bad names, values and escapes, so this
// one throws, with the line number, at the first violation.

export type MetricType = 'counter' | 'gauge' | 'histogram' | 'summary' | 'untyped';

export interface Sample {
  /** The sample's own name (e.g. `x_bucket` of the histogram family `x`). */
  readonly name: string;
  readonly labels: Readonly<Record<string, string>>;
  readonly value: number;
}

export interface MetricFamily {
  readonly name: string;
  readonly help: string;
  readonly type: MetricType;
  readonly samples: Sample[];
}

const METRIC_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*$/;
/** A number as Go's strconv.ParseFloat reads it in decimal (the format's rule): NaN and Inf in any case. */
const FLOAT = /^(?:[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?|[+-]?inf(?:inity)?|nan)$/i;
const TIMESTAMP = /^-?\d+$/;
const TYPES: readonly MetricType[] = ['counter', 'gauge', 'histogram', 'summary', 'untyped'];

class ExpositionError extends Error {}

function parseFloatToken(token: string, what: string): number {
  if (!FLOAT.test(token)) throw new ExpositionError(`${what} '${token}' is not a number`);
  const lower = token.toLowerCase();
  if (lower === 'nan') return NaN;
  if (lower.includes('inf')) return lower.startsWith('-') ? -Infinity : Infinity;
  return Number(token);
}

/** HELP text: only `\\` and `\n` are escapes; any other backslash is an error. */
function unescapeHelp(text: string): string {
  return text.replace(/\\(.?)/g, (_m, c: string) => {
    if (c === '\\') return '\\';
    if (c === 'n') return '\n';
    throw new ExpositionError(`HELP text has an invalid escape '\\${c}'`);
  });
}

/** Reads `{a="x",b="y"}` at `start` of `line`; returns the labels and the index after `}`. */
function readLabels(line: string, start: number): { labels: Record<string, string>; end: number } {
  const labels: Record<string, string> = {};
  let i = start + 1;
  if (line[i] === '}') return { labels, end: i + 1 };
  for (;;) {
    const eq = line.indexOf('=', i);
    if (eq < 0) throw new ExpositionError('label without =');
    const name = line.slice(i, eq);
    if (!LABEL_NAME.test(name) || name.startsWith('__')) throw new ExpositionError(`invalid label name '${name}'`);
    if (Object.hasOwn(labels, name)) throw new ExpositionError(`label '${name}' appears twice`);
    if (line[eq + 1] !== '"') throw new ExpositionError(`label '${name}' value is not quoted`);
    let value = '';
    let j = eq + 2;
    for (;; j++) {
      const c = line[j];
      if (c === undefined) throw new ExpositionError(`label '${name}' value is not closed`);
      if (c === '"') break;
      if (c === '\\') {
        const e = line[++j];
        if (e === '\\' || e === '"') value += e;
        else if (e === 'n') value += '\n';
        else throw new ExpositionError(`label '${name}' value has an invalid escape '\\${e ?? ''}'`);
      } else value += c;
    }
    labels[name] = value;
    i = j + 1;
    if (line[i] === '}') return { labels, end: i + 1 };
    if (line[i] !== ',') throw new ExpositionError(`expected ',' or '}' after label '${name}'`);
    i++;
  }
}

function parseSample(line: string): Sample {
  const m = /^[^{\s]+/.exec(line);
  const name = m?.[0] ?? '';
  if (!METRIC_NAME.test(name)) throw new ExpositionError(`invalid metric name '${name}'`);
  let rest = line.slice(name.length);
  let labels: Record<string, string> = {};
  if (rest.startsWith('{')) {
    const read = readLabels(rest, 0);
    labels = read.labels;
    rest = rest.slice(read.end);
  }
  const parts = rest.split(' ');
  if (parts[0] !== '' || parts.length < 2 || parts.length > 3) throw new ExpositionError(`expected ' value [timestamp]' after the name and labels, got '${rest}'`);
  if (parts[2] !== undefined && !TIMESTAMP.test(parts[2])) throw new ExpositionError(`timestamp '${parts[2]}' is not an integer`);
  return { name, labels, value: parseFloatToken(parts[1]!, 'value') };
}

/** Whether `sample` is one of the samples of the family `family` of type `type` (by its name's suffix and labels). */
function belongs(sample: Sample, family: string, type: MetricType): boolean {
  if (type === 'histogram') {
    if (sample.name === `${family}_bucket`) return Object.hasOwn(sample.labels, 'le');
    return sample.name === `${family}_sum` || sample.name === `${family}_count`;
  }
  if (type === 'summary') {
    if (sample.name === family) return Object.hasOwn(sample.labels, 'quantile');
    return sample.name === `${family}_sum` || sample.name === `${family}_count`;
  }
  return sample.name === family;
}

function seriesKey(name: string, labels: Readonly<Record<string, string>>, without?: string): string {
  return `${name}${JSON.stringify(Object.entries(labels).filter(([k]) => k !== without).sort(([a], [b]) => (a < b ? -1 : 1)))}`;
}

function checkHistogram(f: MetricFamily): void {
  const series = new Map<string, { buckets: Array<[number, number]>; sum?: number; count?: number }>();
  const of = (labels: Readonly<Record<string, string>>) => {
    const key = seriesKey(f.name, labels, 'le');
    let s = series.get(key);
    if (!s) series.set(key, (s = { buckets: [] }));
    return s;
  };
  for (const s of f.samples) {
    if (s.name.endsWith('_bucket')) of(s.labels).buckets.push([parseFloatToken(s.labels.le!, `${f.name} bucket bound`), s.value]);
    else if (s.name.endsWith('_sum')) of(s.labels).sum = s.value;
    else of(s.labels).count = s.value;
  }
  for (const [key, s] of series) {
    if (s.count === undefined || s.sum === undefined) throw new ExpositionError(`histogram series ${key} lacks _sum or _count`);
    if (s.buckets.length === 0) throw new ExpositionError(`histogram series ${key} has no buckets`);
    for (let i = 1; i < s.buckets.length; i++) {
      const [le, n] = s.buckets[i]!;
      const [prevLe, prevN] = s.buckets[i - 1]!;
      if (!(le > prevLe)) throw new ExpositionError(`histogram series ${key}: bucket bounds not ascending (${prevLe} then ${le})`);
      if (n < prevN) throw new ExpositionError(`histogram series ${key}: buckets not cumulative (le=${prevLe}: ${prevN}, le=${le}: ${n})`);
    }
    const [lastLe, lastN] = s.buckets[s.buckets.length - 1]!;
    if (lastLe !== Infinity) throw new ExpositionError(`histogram series ${key}: the last bucket is le=${lastLe}, not +Inf`);
    if (lastN !== s.count) throw new ExpositionError(`histogram series ${key}: +Inf bucket ${lastN} differs from _count ${s.count}`);
  }
}

/** Parses `text`, throwing at the first violation of the format (with its line number). */
export function parsePrometheusText(text: string): Map<string, MetricFamily> {
  const families = new Map<string, MetricFamily>();
  const helps = new Map<string, string>();
  const types = new Map<string, MetricType>();
  const seen = new Set<string>();
  let current: MetricFamily | undefined;
  if (text.length > 0 && !text.endsWith('\n')) throw new ExpositionError('the text does not end with a line feed');
  const lines = text.split('\n');
  lines.pop();
  lines.forEach((line, index) => {
    try {
      if (line === '') return;
      if (line.startsWith('#')) {
        const m = /^# (HELP|TYPE) (\S+)(?: (.*))?$/.exec(line);
        if (!m) return; // a plain comment
        const [, keyword, name, rest] = m as unknown as [string, 'HELP' | 'TYPE', string, string | undefined];
        if (!METRIC_NAME.test(name)) throw new ExpositionError(`invalid metric name '${name}' in ${keyword}`);
        if (families.has(name)) throw new ExpositionError(`${keyword} of ${name} after its samples`);
        if (keyword === 'HELP') {
          if (helps.has(name)) throw new ExpositionError(`second HELP of ${name}`);
          helps.set(name, unescapeHelp(rest ?? ''));
        } else {
          if (types.has(name)) throw new ExpositionError(`second TYPE of ${name}`);
          if (!TYPES.includes(rest as MetricType)) throw new ExpositionError(`unknown TYPE '${rest ?? ''}' of ${name}`);
          types.set(name, rest as MetricType);
        }
        return;
      }
      const sample = parseSample(line);
      if (!current || !belongs(sample, current.name, current.type)) {
        const name = [...types.keys()].find((f) => !families.has(f) && belongs(sample, f, types.get(f)!));
        if (name === undefined) {
          const done = [...families.values()].find((f) => belongs(sample, f.name, f.type));
          throw new ExpositionError(done ? `sample of ${done.name} after another family started` : `sample ${sample.name} belongs to no declared family (no TYPE line)`);
        }
        if (!helps.has(name)) throw new ExpositionError(`family ${name} has no HELP line`);
        current = { name, help: helps.get(name)!, type: types.get(name)!, samples: [] };
        families.set(name, current);
      }
      const key = seriesKey(sample.name, sample.labels);
      if (seen.has(key)) throw new ExpositionError(`series ${key} appears twice`);
      seen.add(key);
      if (current.type === 'counter' && !(sample.value >= 0)) throw new ExpositionError(`counter ${sample.name} is ${sample.value}`);
      current.samples.push(sample);
    } catch (err) {
      if (err instanceof ExpositionError) throw new ExpositionError(`line ${index + 1}: ${err.message}: ${line}`);
      throw err;
    }
  });
  // Families declared without samples (labelled series not observed yet) are still families.
  for (const [name, type] of types) {
    if (families.has(name)) continue;
    if (!helps.has(name)) throw new ExpositionError(`family ${name} has no HELP line`);
    families.set(name, { name, help: helps.get(name)!, type, samples: [] });
  }
  for (const name of helps.keys()) if (!types.has(name)) throw new ExpositionError(`family ${name} has HELP but no TYPE line`);
  for (const f of families.values()) if (f.type === 'histogram') checkHistogram(f);
  return families;
}

/** The samples named `name` of `families` (any family), each with its labels. */
export function samplesNamed(families: ReadonlyMap<string, MetricFamily>, name: string): Sample[] {
  return [...families.values()].flatMap((f) => f.samples.filter((s) => s.name === name));
}
