/**
 * `ctx.fetch` for plays and rows: `safeFetch` (src/runtime/invocation/egress.ts) under
 * the org's egress policy, stopped by a cancel, with the values of secret
 * headers kept out of log lines and error messages.
 *
 * Responses are not memoized: a replayed play fetches again. `ctx.fetch` is
 * for idempotent reads (a lookup, a page); a call that bills or changes
 * something belongs in a tool (`ctx.tool`), whose receipt makes it once.
 */
import type { SubrequestMeter } from "../../core/meter";
import { z } from "zod";
import { messageOf } from "../../core/errors";
import { DEFAULT_EGRESS, EgressError, isSecretHeader, safeFetch, type EgressPolicy } from "./egress";
import { mapStrings } from "../views/redact";

/**
 * `EGRESS_ALLOWLIST`: JSON `{ "<org>": ["api.example.com", "*.example.org"] }`.
 * An org with an entry may fetch only those hosts (`*.` allows subdomains);
 * the entry `"*"` applies to orgs without their own. Unset: no allowlist,
 * only the address-class checks.
 */
export const EgressAllowlist = z.record(z.string().min(1).max(100), z.array(z.string().min(1).max(253)).max(1000));
export type EgressAllowlist = z.infer<typeof EgressAllowlist>;

let cached: { source: string; list: EgressAllowlist } | null = null;

/** The egress policy of an org under `env`; throws `egress_misconfigured` if the allowlist does not parse. */
export function egressPolicyFor(env: Env, org: string): EgressPolicy {
  const source = env.EGRESS_ALLOWLIST;
  if (source === undefined || source === "") return DEFAULT_EGRESS;
  if (cached?.source !== source) {
    let parsed: unknown = null;
    try {
      parsed = JSON.parse(source);
    } catch {
      // Reported just below, with what the variable should hold.
      parsed = null;
    }
    const result = EgressAllowlist.safeParse(parsed);
    if (!result.success)
      throw new EgressError("egress_misconfigured", 'EGRESS_ALLOWLIST must be JSON { "<org>": ["host", "*.example.com"] }');
    cached = { source, list: result.data };
  }
  const hosts = cached.list[org] ?? cached.list["*"];
  return hosts ? { ...DEFAULT_EGRESS, allowHosts: hosts.map((h) => h.toLowerCase()) } : DEFAULT_EGRESS;
}

/** Shorter values are not matched literally: too likely to hit ordinary words. */
const MIN_SECRET_CHARS = 6;

/** The secret header values this invocation's fetches sent: redacted wherever text leaves the run. */
export class SecretValues {
  #values = new Set<string>();
  /**
   * The values, longest first, in one pattern, and those added since it was built (checked one by one): it is built
   * again once they are a quarter of it, so a value per row (a signature per request) costs no rebuild per row.
   */
  #pattern: RegExp | null = null;
  #inPattern = 0;
  #recent: string[] = [];

  addHeaders(headers: HeadersInit | undefined): void {
    for (const [name, value] of new Headers(headers).entries()) {
      if (!isSecretHeader(name)) continue;
      this.#add(value);
      // `Bearer <token>`: the token alone is the secret too.
      const token = /^\S+\s+(\S+)$/.exec(value)?.[1];
      if (token) this.#add(token);
    }
  }

  redact(text: string): string {
    if (this.#values.size === 0) return text;
    if (this.#pattern === null || this.#recent.length > Math.max(32, this.#inPattern / 4)) {
      this.#pattern = new RegExp(
        [...this.#values]
          .sort((a, b) => b.length - a.length)
          .map((v) => v.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"))
          .join("|"),
        "g",
      );
      this.#inPattern = this.#values.size;
      this.#recent = [];
    }
    let out = text;
    for (const value of this.#recent) if (out.includes(value)) out = out.split(value).join("[REDACTED]");
    return out.replace(this.#pattern, "[REDACTED]");
  }

  /** A copy of a JSON value (a run's error) with every string in it redacted. */
  redactDeep<T>(value: T): T {
    return mapStrings(value, (text) => this.redact(text));
  }

  #add(value: string): void {
    if (value.length < MIN_SECRET_CHARS || this.#values.has(value)) return;
    this.#values.add(value);
    if (this.#pattern === null) return;
    // Inside a value the pattern holds, it would be replaced first and break that one's match: built again instead.
    for (const held of this.#values) {
      if (held !== value && held.includes(value)) {
        this.#pattern = null;
        return;
      }
    }
    // Longest first, as in the pattern.
    const at = this.#recent.findIndex((v) => v.length < value.length);
    this.#recent.splice(at === -1 ? this.#recent.length : at, 0, value);
  }
}

export interface PlayFetchOptions {
  env: Env;
  org: string;
  /** The invocation's signal: a cancel (or a yield) stops a fetch in flight. */
  signal: AbortSignal;
  secrets: SecretValues;
  /** Counts each request (and redirect hop) as one of the invocation's subrequests. */
  meter?: SubrequestMeter;
}

export class PlayFetch {
  #deps: PlayFetchOptions;

  constructor(options: PlayFetchOptions) {
    this.#deps = options;
  }

  /** See `PlayContext.fetch`. */
  async fetch(url: string | URL, init: RequestInit = {}): Promise<Response> {
    const { secrets } = this.#deps;
    secrets.addHeaders(init.headers);
    const signal = init.signal ? AbortSignal.any([init.signal, this.#deps.signal]) : this.#deps.signal;
    try {
      return await safeFetch(String(url), { ...init, signal }, egressPolicyFor(this.#deps.env, this.#deps.org), this.#deps.meter);
    } catch (error) {
      if (this.#deps.signal.aborted) throw this.#deps.signal.reason;
      if (error instanceof EgressError) throw new EgressError(error.code, secrets.redact(error.message));
      throw new EgressError("egress_failed", secrets.redact(messageOf(error)));
    }
  }
}
