// Field values as the index stores them: numbers as float64, dates as epoch milliseconds (UTC).
// Date parsing is strict ISO 8601 and never goes through Date.parse, which reads a date-time
// without a zone as local time: here a missing zone means UTC, as Solr requires instants in UTC.

const DATE_RE = /^([+-]?\d{4,6})-(\d{2})-(\d{2})(?:[T ](\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?(Z|[+-]\d{2}:?\d{2})?)?$/;

/** Epoch milliseconds of an ISO 8601 date or date-time, or NaN when `text` is not one. */
export function parseDate(text: string): number {
  const m = DATE_RE.exec(text);
  if (m === null) return NaN;
  const year = Number(m[1]);
  const month = Number(m[2]);
  const day = Number(m[3]);
  const hour = m[4] === undefined ? 0 : Number(m[4]);
  const minute = m[5] === undefined ? 0 : Number(m[5]);
  const second = m[6] === undefined ? 0 : Number(m[6]);
  const ms = m[7] === undefined ? 0 : Math.floor(Number(`0.${m[7]}`) * 1000 + 1e-6);
  if (month < 1 || month > 12 || day < 1 || day > daysInMonth(year, month)) return NaN;
  if (hour > 23 || minute > 59 || second > 59) return NaN;
  let offsetMinutes = 0;
  const zone = m[8];
  if (zone !== undefined && zone !== 'Z') {
    const sign = zone[0] === '-' ? -1 : 1;
    const digits = zone.slice(1).replace(':', '');
    const zh = Number(digits.slice(0, 2));
    const zm = Number(digits.slice(2, 4));
    if (zh > 23 || zm > 59) return NaN;
    offsetMinutes = sign * (zh * 60 + zm);
  }
  // Date.UTC maps years 0..99 to 1900..1999; setUTCFullYear does not.
  const d = new Date(0);
  d.setUTCFullYear(year, month - 1, day);
  d.setUTCHours(hour, minute, second, ms);
  const t = d.getTime() - offsetMinutes * 60000;
  return Number.isFinite(t) ? t : NaN;
}

/**
 * Elasticsearch's date detection for undeclared fields (its default dynamic format,
 * strict_date_optional_time): a string that is a date (yyyy-MM-dd) or a date-time
 * (yyyy-MM-ddTHH:mm[:ss[.fraction]][zone]) is a date, as epoch milliseconds; anything else is
 * NaN (and stays text). Cheap for ordinary strings: most fail on the length or the first dash.
 */
export function detectDate(text: string): number {
  if (text.length < 10 || text.length > 35 || text.charCodeAt(4) !== 0x2d || !DETECT_RE.test(text)) return NaN;
  return parseDate(text);
}

const DETECT_RE = /^\d{4}-\d{2}-\d{2}(?:T\d{2}:\d{2}(?::\d{2}(?:\.\d{1,9})?)?(?:Z|[+-]\d{2}:?\d{2})?)?$/;

function daysInMonth(year: number, month: number): number {
  if (month === 2) return (year % 4 === 0 && year % 100 !== 0) || year % 400 === 0 ? 29 : 28;
  return month === 4 || month === 6 || month === 9 || month === 11 ? 30 : 31;
}

/** A date field value: an ISO 8601 string or epoch milliseconds; NaN when it is neither. */
export function toDate(value: unknown): number {
  if (typeof value === 'number') return Number.isFinite(value) ? value : NaN;
  if (typeof value === 'string') return parseDate(value);
  return NaN;
}

/** A number field value: a finite number or a string that is exactly one; NaN otherwise. */
export function toNumber(value: unknown): number {
  if (typeof value === 'number') return Number.isFinite(value) ? value : NaN;
  if (typeof value === 'string') return parseNumber(value);
  return NaN;
}

/** A decimal number written in full (no hex, no empty string, no 'Infinity'); NaN otherwise. */
export function parseNumber(text: string): number {
  if (text.length === 0 || text.length > 64) return NaN;
  const c = text.charCodeAt(0);
  // Number('') is 0 and Number(' 1') is 1; only digits, sign or dot may start a number here.
  if (!((c >= 0x30 && c <= 0x39) || c === 0x2d || c === 0x2b || c === 0x2e)) return NaN;
  const last = text.charCodeAt(text.length - 1);
  if (!((last >= 0x30 && last <= 0x39) || last === 0x2e)) return NaN;
  if (text.length > 1 && (text[1] === 'x' || text[1] === 'X' || text[1] === 'b' || text[1] === 'o' || text[1] === 'B' || text[1] === 'O')) return NaN;
  const n = Number(text);
  return Number.isFinite(n) ? n : NaN;
}
