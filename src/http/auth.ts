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

/** The org a request's bearer token (or `token` query parameter, for WebSockets) maps to, or null. */
export function orgOf(env: Env, request: Request): string | null {
  const header = request.headers.get("Authorization");
  const token = header?.match(/^Bearer\s+(\S+)$/i)?.[1] ?? null;
  if (!token) return null;
  return Object.hasOwn(tokensOf(env), token) ? tokensOf(env)[token]! : null;
}
