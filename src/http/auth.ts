/** Bearer tokens → orgs, from `API_TOKENS` (API.md "Authentication"). */
import { z } from "zod";
import { TroupeError } from "../shared/errors";

const Tokens = z.record(z.string().min(1), z.string().min(1).max(100));
const DEV_TOKENS: Record<string, string> = { "dev-token": "dev" };

let cached: { source: string; tokens: Record<string, string> } | null = null;

function tokensOf(env: Env): Record<string, string> {
  const source = env.API_TOKENS;
  if (source === undefined || source === "") return DEV_TOKENS;
  if (cached?.source === source) return cached.tokens;
  let parsed: unknown;
  try {
    parsed = JSON.parse(source);
  } catch {
    parsed = null;
  }
  const result = Tokens.safeParse(parsed);
  if (!result.success) throw new TroupeError("server_misconfigured", "API_TOKENS is not a JSON object of token → org", { status: 500 });
  cached = { source, tokens: result.data };
  return result.data;
}

/**
 * The org a request's bearer token maps to, or null. With `queryToken` (only
 * the live WebSocket route: browsers cannot set headers on a WebSocket) a
 * `token` query parameter is accepted when there is no Authorization header.
 */
export function orgOf(env: Env, request: Request, options: { queryToken?: boolean } = {}): string | null {
  const header = request.headers.get("Authorization");
  let token = header?.match(/^Bearer\s+(\S+)$/i)?.[1] ?? null;
  if (header === null && options.queryToken) token = new URL(request.url).searchParams.get("token");
  if (!token) return null;
  return Object.hasOwn(tokensOf(env), token) ? tokensOf(env)[token]! : null;
}
