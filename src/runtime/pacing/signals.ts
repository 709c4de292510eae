/**
 * A provider's own rate-limit signals, read from the headers of one answer:
 *
 * - `Retry-After` (delta-seconds or an HTTP date), or `Retry-After-Ms`
 *   (milliseconds; the simulator and a few APIs send it): how long to wait.
 * - The IETF fields (draft-ietf-httpapi-ratelimit-headers):
 *   `RateLimit-Policy: "default";q=100;w=1` announces a quota of `q` requests
 *   per `w` seconds, and `RateLimit: "default";r=42;t=1` says `r` are left
 *   and more is made available in `t` seconds. The older drafts' forms are
 *   read too: `RateLimit: limit=100, remaining=42, reset=5`,
 *   `RateLimit-Policy: 100;w=10`, and separate `RateLimit-Limit`,
 *   `RateLimit-Remaining` and `RateLimit-Reset` fields.
 * - The common `X-RateLimit-Limit`, `X-RateLimit-Remaining` and
 *   `X-RateLimit-Reset` (delta seconds, or epoch seconds or milliseconds:
 *   told apart by size). These do not name the quota's window.
 *
 * Where several forms are present the IETF fields win, then the older IETF
 * fields, then `X-RateLimit-*`. A malformed value is ignored, never thrown:
 * a provider's header must not fail a call.
 */
import { parseDictionary, parseList, Token, type BareItem, type Item, type InnerList } from "structured-headers";

/** A quota: at most `requests` per `windowMs`. */
export interface Quota {
  requests: number;
  /** The quota's window; null when the provider does not name it (`X-RateLimit-Limit`). */
  windowMs: number | null;
}

/** What is left of the quota now, and in how long more is made available. */
export interface Remaining {
  requests: number;
  /** Null when the provider does not say. */
  resetMs: number | null;
}

/** What one answer's headers say about the provider's rate limit; every field null when nothing. */
export interface RateLimitSignals {
  /** How long the provider asks callers to wait, in ms from the answer. */
  retryAfterMs: number | null;
  /** The quota the provider announces (the most restrictive when it announces several). */
  quota: Quota | null;
  remaining: Remaining | null;
}

/** No signal at all. */
export const NO_SIGNALS: RateLimitSignals = { retryAfterMs: null, quota: null, remaining: null };

/** Waits and resets past an hour are taken as an hour (the gate does too): a pause that long is an outage, not pacing. */
const MAX_WAIT_MS = 3_600_000;
/** Counts and windows past this are not limits anyone paces by (`9223372036854775807` says "unlimited"). */
const MAX_COUNT = 1e12;

/**
 * A wait as pacing takes it: a number of milliseconds from 0, at most an
 * hour; anything else (NaN from a header a tool parsed as a number, a
 * negative) says nothing. A wait that is not a number would pause a pacer
 * for good.
 */
export function saneWaitMs(ms: number | null | undefined): number | null {
  return typeof ms === "number" && ms >= 0 ? Math.min(ms, MAX_WAIT_MS) : null;
}

/** Epoch values above these are absolute times, not delta seconds. */
const EPOCH_SECONDS_FROM = 1e9;
const EPOCH_MS_FROM = 1e12;

/**
 * The rate-limit signals in `headers`, relative to `now` (for HTTP dates and
 * epoch resets).
 *
 * @example
 * readRateLimitSignals(new Headers({ "RateLimit-Policy": '"default";q=100;w=1', RateLimit: '"default";r=42;t=1' }))
 * // { retryAfterMs: null, quota: { requests: 100, windowMs: 1000 }, remaining: { requests: 42, resetMs: 1000 } }
 */
export function readRateLimitSignals(headers: HeadersInit, now: number = Date.now()): RateLimitSignals {
  let h: Headers;
  try {
    h = headers instanceof Headers ? headers : new Headers(headers);
  } catch {
    // Not headers at all (a tool passed something else): there is nothing to read.
    return NO_SIGNALS;
  }
  const ietf = ietfFields(h);
  const legacy = numericFields(h, "ratelimit", now);
  const x = numericFields(h, "x-ratelimit", now);
  return {
    retryAfterMs: saneWaitMs(retryAfterMs(h, now)),
    quota: saneQuota(ietf.quota ?? legacy.quota ?? x.quota),
    remaining: saneRemaining(ietf.remaining ?? legacy.remaining ?? x.remaining),
  };
}

/** A quota pacing can use: a count past {@link MAX_COUNT} is no limit; a window of 0 or past it is not named. */
function saneQuota(quota: Quota | null): Quota | null {
  if (quota === null || !(quota.requests <= MAX_COUNT)) return null;
  const { windowMs } = quota;
  return { requests: quota.requests, windowMs: windowMs !== null && windowMs > 0 && windowMs <= MAX_COUNT ? windowMs : null };
}

function saneRemaining(remaining: Remaining | null): Remaining | null {
  if (remaining === null || !(remaining.requests <= MAX_COUNT)) return null;
  return { requests: remaining.requests, resetMs: saneWaitMs(remaining.resetMs) };
}

/** Whether `signals` says anything. */
export function hasSignals(signals: RateLimitSignals): boolean {
  return signals.retryAfterMs !== null || signals.quota !== null || signals.remaining !== null;
}

/** `b`'s signals over `a`'s, field by field (for an answer reported twice, e.g. by the tool and on its error). */
export function mergeSignals(a: RateLimitSignals, b: RateLimitSignals): RateLimitSignals {
  return { retryAfterMs: b.retryAfterMs ?? a.retryAfterMs, quota: b.quota ?? a.quota, remaining: b.remaining ?? a.remaining };
}

/** The rate a quota allows, per second; null without a window. */
function quotaPerSecond(quota: Quota): number | null {
  return quota.windowMs === null ? null : (quota.requests * 1000) / quota.windowMs;
}

/**
 * A field as sent once: a proxy repeating a header with one value joins the copies (`"120, 120"`, an HTTP date
 * twice, commas of its own and all). Anything else as it is (differing values then parse as nothing).
 */
function unrepeated(value: string | null): string | null {
  if (value === null) return null;
  const text = value.trim();
  for (let copies = 2; copies <= 8; copies++) {
    const length = (text.length - 2 * (copies - 1)) / copies;
    if (!Number.isInteger(length) || length <= 0) continue;
    const one = text.slice(0, length);
    if (Array(copies).fill(one).join(", ") === text) return one;
  }
  return text;
}

function retryAfterMs(h: Headers, now: number): number | null {
  const precise = nonNegative(unrepeated(h.get("retry-after-ms")));
  if (precise !== null) return precise;
  const value = unrepeated(h.get("retry-after"));
  if (!value) return null;
  const seconds = nonNegative(value);
  if (seconds !== null) return seconds * 1000;
  // An HTTP date; `Date.parse` alone would read a bare "5" as a year.
  if (!/[a-z]{3}/i.test(value)) return null;
  const at = Date.parse(value);
  return Number.isFinite(at) ? Math.max(0, at - now) : null;
}

/** `<prefix>-Limit`, `-Remaining` and `-Reset` as plain numbers. */
function numericFields(h: Headers, prefix: string, now: number): { quota: Quota | null; remaining: Remaining | null } {
  const limitField = h.get(`${prefix}-limit`) ?? "";
  // The first number is the quota; an older IETF draft appends its policies (`100, 100;w=60`), whose window names it.
  const leading = /^\s*(\d+)\s*(?:[,;]|$)/.exec(limitField)?.[1];
  const limit = leading === undefined ? null : Number(leading);
  const window = /;\s*w=(\d+)/.exec(limitField)?.[1];
  const remaining = count(unrepeated(h.get(`${prefix}-remaining`)));
  return {
    quota: limit !== null && limit > 0 ? { requests: limit, windowMs: window ? Number(window) * 1000 : null } : null,
    remaining: remaining === null ? null : { requests: remaining, resetMs: resetMs(unrepeated(h.get(`${prefix}-reset`)), now) },
  };
}

/** A reset as delta seconds, epoch seconds or epoch milliseconds, in ms from now. */
function resetMs(value: string | null, now: number): number | null {
  const n = nonNegative(value);
  if (n === null) return null;
  if (n >= EPOCH_MS_FROM) return Math.max(0, n - now);
  if (n >= EPOCH_SECONDS_FROM) return Math.max(0, n * 1000 - now);
  return n * 1000;
}

/** `RateLimit-Policy` and `RateLimit`, current draft or the older dictionary form. */
function ietfFields(h: Headers): { quota: Quota | null; remaining: Remaining | null } {
  let quota: Quota | null = null;
  for (const [value, params] of items(h.get("ratelimit-policy"))) {
    const unit = params.get("qu");
    if (unit !== undefined && text(unit) !== "requests") continue;
    // The current draft names the policy and puts the quota in `q`; an older one made the quota the item.
    const requests = integer(params.get("q")) ?? integer(value);
    const seconds = integer(params.get("w"));
    if (requests === null || requests <= 0) continue;
    const next: Quota = { requests, windowMs: seconds !== null && seconds > 0 ? seconds * 1000 : null };
    if (quota === null || tighter(next, quota)) quota = next;
  }
  let remaining: Remaining | null = null;
  const field = h.get("ratelimit");
  for (const [, params] of items(field)) {
    const r = integer(params.get("r"));
    if (r === null) continue;
    const t = integer(params.get("t"));
    const next: Remaining = { requests: r, resetMs: t === null ? null : t * 1000 };
    if (remaining === null || next.requests < remaining.requests) remaining = next;
  }
  if (remaining === null && field !== null) {
    // The older drafts' dictionary: `limit=100, remaining=42, reset=5`.
    const old = dictionary(field);
    const limit = integer(old.get("limit"));
    const left = integer(old.get("remaining"));
    const reset = integer(old.get("reset"));
    if (quota === null && limit !== null && limit > 0) quota = { requests: limit, windowMs: null };
    if (left !== null) remaining = { requests: left, resetMs: reset === null ? null : reset * 1000 };
  }
  return { quota, remaining };
}

/** Whether quota `a` allows fewer requests per second than `b` (a window-less quota counts as the looser). */
function tighter(a: Quota, b: Quota): boolean {
  const ra = quotaPerSecond(a);
  const rb = quotaPerSecond(b);
  if (ra === null) return rb === null && a.requests < b.requests;
  return rb === null || ra < rb;
}

/** The items of a structured list field (inner lists skipped); none when absent or malformed. */
function items(field: string | null): Item[] {
  if (field === null) return [];
  try {
    return parseList(field).filter((member): member is Item => !isInnerList(member));
  } catch {
    // Malformed (or the older dictionary form): the field says nothing as a list.
    return [];
  }
}

/** A structured dictionary's bare values; empty when absent or malformed. */
function dictionary(field: string): Map<string, BareItem> {
  try {
    const values = new Map<string, BareItem>();
    for (const [key, member] of parseDictionary(field)) if (!isInnerList(member)) values.set(key, member[0]);
    return values;
  } catch {
    // Malformed: the field says nothing.
    return new Map();
  }
}

function isInnerList(member: Item | InnerList): member is InnerList {
  return Array.isArray(member[0]);
}

function integer(value: BareItem | undefined): number | null {
  return typeof value === "number" && Number.isInteger(value) && value >= 0 ? value : null;
}

function text(value: BareItem): string | null {
  if (typeof value === "string") return value;
  return value instanceof Token ? value.toString() : null;
}

/** A non-negative decimal number, or null. */
function nonNegative(value: string | null | undefined): number | null {
  const trimmed = value?.trim();
  if (!trimmed || !/^\d+(\.\d+)?$/.test(trimmed)) return null;
  return Number(trimmed);
}

/** A non-negative integer, or null. */
function count(value: string | null | undefined): number | null {
  const trimmed = value?.trim();
  return trimmed && /^\d+$/.test(trimmed) ? Number(trimmed) : null;
}

/** Collects what one answer's headers say, however many times its tool reports them. */
export class AnswerSignals {
  #signals: RateLimitSignals = NO_SIGNALS;

  /** Reads `headers` in; later reports win field by field. */
  add(headers: HeadersInit): void {
    this.#signals = mergeSignals(this.#signals, readRateLimitSignals(headers));
  }

  /** What the answer said; null when nothing. */
  get signals(): RateLimitSignals | null {
    return hasSignals(this.#signals) ? this.#signals : null;
  }
}
