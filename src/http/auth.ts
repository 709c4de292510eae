/**
 * Bearer tokens → orgs, from `API_TOKENS` (API.md "Authentication").
 *
 * Local development is `TROUPE_LOCAL_DEV=on`, set in wrangler.toml's
 * top-level `[vars]` (what `npm start` and the test runner use) and absent
 * from `[env.production]`. Only there does an unset `API_TOKENS` mean the
 * single token `dev-token` → org `dev`, and only there may tokens be short.
 * Anywhere else the Worker fails closed: an unset, empty or malformed
 * `API_TOKENS`, or one with a short token, refuses every request.
 */
import { z } from "zod";

const Tokens = z.record(z.string().min(1), z.string().min(1).max(100));
const DEV_TOKENS: ReadonlyMap<string, string> = new Map([["dev-token", "dev"]]);

/**
 * Tokens shorter than this are refused outside local development: easy to
 * guess, and too short for the log redactor to match them literally.
 */
export const MIN_TOKEN_CHARS = 16;

/** The tokens the Worker accepts, or why it cannot accept any. */
export type TokenConfig = { status: "ready"; tokens: ReadonlyMap<string, string> } | { status: "misconfigured"; problem: string };

/** Whether the Worker runs in local development (`npm start`, the test runner); see the module comment. */
export function isLocalDevelopment(env: Env): boolean {
  return env.TROUPE_LOCAL_DEV === "on";
}

const SET_IT = `set it with \`wrangler secret put API_TOKENS --env production\` to JSON { "<token>": "<org>" }, each token at least ${MIN_TOKEN_CHARS} random characters`;

function parseTokens(source: string | undefined, local: boolean): TokenConfig {
  if (source === undefined || source === "") {
    return local
      ? { status: "ready", tokens: DEV_TOKENS }
      : { status: "misconfigured", problem: `API_TOKENS is not set, so no request can be authenticated: ${SET_IT}` };
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(source);
  } catch {
    // Reported just below, with what the variable should hold.
    parsed = null;
  }
  const result = Tokens.safeParse(parsed);
  if (!result.success) return { status: "misconfigured", problem: "API_TOKENS is not a JSON object of token → org" };
  const tokens = new Map(Object.entries(result.data));
  if (tokens.size === 0) return { status: "misconfigured", problem: `API_TOKENS holds no tokens: ${SET_IT}` };
  const short = [...tokens].filter(([token]) => token.length < MIN_TOKEN_CHARS);
  if (!local && short.length > 0) {
    // Answered to every request, signed in or not: the orgs are named in the Worker's log only.
    const orgs = [...new Set(short.map(([, org]) => org))].join(", ");
    console.error(`API_TOKENS: the tokens of orgs ${orgs} are shorter than ${MIN_TOKEN_CHARS} characters`);
    return {
      status: "misconfigured",
      problem: `API_TOKENS has ${short.length} token(s) shorter than ${MIN_TOKEN_CHARS} characters (the Worker's log names their orgs); replace them with long random tokens`,
    };
  }
  return { status: "ready", tokens };
}

let cached: { source: string | undefined; local: boolean; config: TokenConfig } | null = null;

/** The token configuration of `env`, parsed once per distinct `API_TOKENS`. */
export function tokenConfig(env: Env): TokenConfig {
  const local = isLocalDevelopment(env);
  if (!cached || cached.source !== env.API_TOKENS || cached.local !== local) {
    cached = { source: env.API_TOKENS, local, config: parseTokens(env.API_TOKENS, local) };
  }
  return cached.config;
}

/**
 * The org a request's bearer token maps to, or null. With `queryToken` (only
 * the live WebSocket route: browsers cannot set headers on a WebSocket) a
 * `token` query parameter is accepted when there is no Authorization header.
 */
export function orgOf(tokens: ReadonlyMap<string, string>, request: Request, options: { queryToken?: boolean } = {}): string | null {
  const header = request.headers.get("Authorization");
  let token = header?.match(/^Bearer\s+(\S+)$/i)?.[1] ?? null;
  if (header === null && options.queryToken) token = new URL(request.url).searchParams.get("token");
  if (!token) return null;
  return tokens.get(token) ?? null;
}
