// The strict Prometheus text parser the /metrics tests use (test/support/prometheus-text.ts): it
// reads what prom-client writes, escapes included, and refuses each violation of the format.
import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { parsePrometheusText, samplesNamed } from './support/prometheus-text.js';

const ok = (body: string): string => `# HELP x_total A counter\n# TYPE x_total counter\n${body}`;
const histogram = (lines: string[]): string => ['# HELP h Latency', '# TYPE h histogram', ...lines, ''].join('\n');

describe('parsePrometheusText', () => {
  it("reads prom-client's output: families, types, escaped label values, histograms", async () => {
    const registry = new Registry();
    new Counter({ name: 'c_total', help: 'Counted, with a \\ and a\nnew line', labelNames: ['l'], registers: [registry] }).inc({ l: 'a "quoted" \\ value\nover two lines' }, 2);
    new Gauge({ name: 'g', help: 'A gauge', registers: [registry] }).set(-1.5);
    const h = new Histogram({ name: 'h_seconds', help: 'Durations', labelNames: ['route'], buckets: [0.1, 1], registers: [registry] });
    h.observe({ route: '/a' }, 0.05);
    h.observe({ route: '/a' }, 5);
    new Counter({ name: 'unused_total', help: 'Never incremented', labelNames: ['k'], registers: [registry] });
    const families = parsePrometheusText(await registry.metrics());
    expect(families.get('c_total')).toMatchObject({ type: 'counter', help: 'Counted, with a \\ and a\nnew line' });
    expect(samplesNamed(families, 'c_total')).toEqual([{ name: 'c_total', labels: { l: 'a "quoted" \\ value\nover two lines' }, value: 2 }]);
    expect(families.get('g')).toMatchObject({ type: 'gauge', samples: [{ value: -1.5 }] });
    expect(families.get('h_seconds')?.type).toBe('histogram');
    expect(samplesNamed(families, 'h_seconds_bucket').map((s) => [s.labels.le, s.value])).toEqual([
      ['0.1', 1],
      ['1', 1],
      ['+Inf', 2],
    ]);
    expect(families.get('unused_total')).toMatchObject({ type: 'counter', samples: [] });
  });

  it("reads numbers as Go's ParseFloat does (the format's rule): NaN and Inf in any case", () => {
    const families = parsePrometheusText('# HELP g a\n# TYPE g gauge\ng{a="1"} Nan\ng{a="2"} -Inf\ng{a="3"} 1.5e3\ng{a="4"} +inf\n');
    expect(samplesNamed(families, 'g').map((s) => s.value)).toEqual([NaN, -Infinity, 1500, Infinity]);
  });

  it.each([
    ['a sample of no declared family', 'y 1\n', 'belongs to no declared family'],
    ['a family without HELP', '# TYPE y gauge\ny 1\n', 'no HELP'],
    ['a family without TYPE', '# HELP y a gauge\ny 1\n', 'no declared family'],
    ['an unknown type', '# HELP y a\n# TYPE y meter\ny 1\n', "unknown TYPE 'meter'"],
    ['a second TYPE', ok('# TYPE x_total counter\nx_total 1\n'), 'second TYPE'],
    ['a bad metric name', '# HELP 1x a\n# TYPE 1x gauge\n1x 1\n', "invalid metric name '1x'"],
    ['a bad value', ok('x_total one\n'), "value 'one' is not a number"],
    ['a bad timestamp', ok('x_total 1 soon\n'), 'timestamp'],
    ['an unquoted label value', ok('x_total{a=b} 1\n'), 'not quoted'],
    ['an invalid escape', ok('x_total{a="\\q"} 1\n'), 'invalid escape'],
    ['an unclosed label value', ok('x_total{a="b} 1\n'), 'not closed'],
    ['a reserved label name', ok('x_total{__a="b"} 1\n'), "invalid label name '__a'"],
    ['a label twice', ok('x_total{a="1",a="2"} 1\n'), 'appears twice'],
    ['a series twice', ok('x_total{a="1"} 1\nx_total{a="1"} 2\n'), 'appears twice'],
    ['a negative counter', ok('x_total -1\n'), 'counter x_total is -1'],
    ['no final line feed', ok('x_total 1'), 'line feed'],
    ['a family split by another', `${ok('x_total{a="1"} 1\n')}# HELP y a\n# TYPE y gauge\ny 1\nx_total{a="2"} 1\n`, 'after another family started'],
    ['a bucket without le', histogram(['h_bucket 1', 'h_sum 1', 'h_count 1']), 'no declared family'],
    ['buckets not cumulative', histogram(['h_bucket{le="1"} 2', 'h_bucket{le="2"} 1', 'h_bucket{le="+Inf"} 2', 'h_sum 1', 'h_count 2']), 'not cumulative'],
    ['bounds not ascending', histogram(['h_bucket{le="2"} 1', 'h_bucket{le="1"} 1', 'h_bucket{le="+Inf"} 1', 'h_sum 1', 'h_count 1']), 'not ascending'],
    ['no +Inf bucket', histogram(['h_bucket{le="1"} 1', 'h_sum 1', 'h_count 1']), 'not +Inf'],
    ['+Inf other than _count', histogram(['h_bucket{le="1"} 1', 'h_bucket{le="+Inf"} 2', 'h_sum 1', 'h_count 3']), 'differs from _count'],
    ['no _count', histogram(['h_bucket{le="+Inf"} 2', 'h_sum 1']), 'lacks _sum or _count'],
  ])('refuses %s', (_what, text, message) => {
    expect(() => parsePrometheusText(text)).toThrow(message);
  });
});
