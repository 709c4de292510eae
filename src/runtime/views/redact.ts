/**
 * Redaction of secrets from text that leaves the runtime (log lines in the
 * ledger and on live sockets). Pure: the coordinator builds one `Redactor`
 * from its environment and runs every log line through it before storing it.
 *
 * What is replaced by `[REDACTED]`:
 * - the exact values of known secrets (tool credentials from the environment
 *   and API tokens);
 * - whatever follows `Bearer ` (an authorization header pasted into a log);
 * - the value of `api_key=…`, `token: …`, `secret=…`, `password=…` pairs;
 * - tokens of well-known shapes (`sk_live_…`, `ghp_…`, `xoxb-…`, `AKIA…`, JWTs);
 * - any other long, high-entropy run of token characters (mixed case and
 *   digits, ≥ 32 characters), which is how most API keys look.
 */

/** What a redacted value is replaced with. */
export const REDACTED = "[REDACTED]";

/** Environment variables whose values are credentials, by name. */
const SECRET_NAME = /_(KEY|TOKEN|SECRET)$/;

/** Secret values shorter than this are not matched literally: too likely to hit ordinary words. */
export const MIN_SECRET_CHARS = 8;

const BEARER = /\b(Bearer\s+)[^\s"',;]+/gi;
const ASSIGNED = /\b((?:api[_-]?key|access[_-]?token|auth[_-]?token|token|secret|password|passwd)["']?\s*[:=]\s*["']?)[^\s"'&,;]+/gi;
const KNOWN_SHAPES = [
  /\b(?:sk|pk|rk)_(?:live|test)_[A-Za-z0-9]{8,}/g,
  /\bgh[pousr]_[A-Za-z0-9]{20,}/g,
  /\bgithub_pat_[A-Za-z0-9_]{20,}/g,
  /\bxox[abprs]-[A-Za-z0-9-]{10,}/g,
  /\bAKIA[0-9A-Z]{16}\b/g,
  /\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}/g,
];
const LONG_TOKEN = /[A-Za-z0-9_\-+/=]{32,}/g;

/**
 * The secret values in an environment: string values of variables named
 * `*_KEY`, `*_TOKEN` or `*_SECRET`, and the tokens (keys) of `API_TOKENS`.
 */
export function secretsFromEnv(env: Record<string, unknown>): string[] {
  const secrets: string[] = [];
  for (const [name, value] of Object.entries(env)) {
    if (typeof value === "string" && SECRET_NAME.test(name)) secrets.push(value);
  }
  if (typeof env.API_TOKENS === "string" && env.API_TOKENS !== "") {
    let tokens: unknown;
    try {
      tokens = JSON.parse(env.API_TOKENS);
    } catch {
      // A malformed API_TOKENS is reported by authentication (503 server_misconfigured); nothing to redact here.
      tokens = null;
    }
    if (tokens && typeof tokens === "object") secrets.push(...Object.keys(tokens));
  }
  return secrets;
}

/** Whether a run of token characters looks random enough to be a key. */
function looksLikeKey(candidate: string): boolean {
  if (!/[a-z]/.test(candidate) || !/[A-Z]/.test(candidate) || !/[0-9]/.test(candidate)) return false;
  const counts = new Map<string, number>();
  for (const ch of candidate) counts.set(ch, (counts.get(ch) ?? 0) + 1);
  let bits = 0;
  for (const n of counts.values()) {
    const p = n / candidate.length;
    bits -= p * Math.log2(p);
  }
  return bits >= 4;
}

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

/**
 * Replaces secrets in text with `[REDACTED]`.
 *
 * @example
 * const redactor = new Redactor({ secrets: secretsFromEnv(env) });
 * redactor.redact("calling with Bearer abc.def") // "calling with Bearer [REDACTED]"
 */
export class Redactor {
  #literal: RegExp | null;

  constructor(options: { secrets: readonly string[] }) {
    const values = [...new Set(options.secrets.filter((s) => s.length >= MIN_SECRET_CHARS))].sort((a, b) => b.length - a.length);
    this.#literal = values.length ? new RegExp(values.map(escapeRegExp).join("|"), "g") : null;
  }

  /** `text` with every secret it contains replaced. */
  redact(text: string): string {
    let out = this.#literal ? text.replace(this.#literal, REDACTED) : text;
    out = out.replace(BEARER, `$1${REDACTED}`);
    out = out.replace(ASSIGNED, (match, prefix: string) => (match.slice(prefix.length) === REDACTED ? match : `${prefix}${REDACTED}`));
    for (const shape of KNOWN_SHAPES) out = out.replace(shape, REDACTED);
    return out.replace(LONG_TOKEN, (candidate) => (looksLikeKey(candidate) ? REDACTED : candidate));
  }

  /** A copy of a JSON value with every string in it redacted. */
  redactDeep<T>(value: T): T {
    return mapStrings(value, (text) => this.redact(text));
  }
}

/** A copy of a JSON value with `change` applied to every string in it (keys kept). */
export function mapStrings<T>(value: T, change: (text: string) => string): T {
  if (typeof value === "string") return change(value) as T;
  if (Array.isArray(value)) return value.map((v) => mapStrings(v, change)) as T;
  if (value && typeof value === "object") {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, mapStrings(v, change)])) as T;
  }
  return value;
}

const redactors = new WeakMap<object, Redactor>();

/** The redactor of an environment's secrets ({@link secretsFromEnv}), built once per environment object. */
export function redactorFor(env: object): Redactor {
  let redactor = redactors.get(env);
  if (!redactor) {
    redactor = new Redactor({ secrets: secretsFromEnv(env as Record<string, unknown>) });
    redactors.set(env, redactor);
  }
  return redactor;
}
