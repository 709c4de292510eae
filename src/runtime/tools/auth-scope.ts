/**
 * Auth scopes: the digest of the credentials a tool runs with, part of every
 * receipt key. Resolved once per tool per invocation, and re-resolved when a
 * provider says the credentials changed.
 */
import type { Log } from "../../contracts/events";
import { ToolCallError } from "../../play/tool-error";
import type { AnyTool } from "../../play/types";
import { sha256Hex } from "../../core/hash";
import { toolEnv } from "../../play/define";

/** The scope of a tool that declares no `authScope`. */
export const DEFAULT_AUTH_SCOPE = "default";

/** Resolves and caches each tool's auth-scope digest for one invocation. */
export class AuthScopes {
  #env: Env;
  #cache = new Map<string, Promise<string>>();

  constructor(options: { env: Env }) {
    this.#env = options.env;
  }

  /** The tool's current scope digest (cached). */
  digest(tool: AnyTool): Promise<string> {
    let digest = this.#cache.get(tool.id);
    if (!digest) {
      digest = this.#resolve(tool);
      this.#cache.set(tool.id, digest);
      // A failed resolution is not cached: the next call asks again.
      digest.catch(() => this.#cache.delete(tool.id));
    }
    return digest;
  }

  /**
   * Resolves the scope again unless that already happened since `stale` was
   * handed out (many calls hear of one credential change at once).
   */
  async refresh(tool: AnyTool, stale: string): Promise<string> {
    // A current resolution that failed counts as stale: resolve afresh below.
    const current = await this.digest(tool).catch(() => stale);
    if (current !== stale) return current;
    this.#cache.delete(tool.id);
    return this.digest(tool);
  }

  async #resolve(tool: AnyTool): Promise<string> {
    if (!tool.authScope) return DEFAULT_AUTH_SCOPE;
    const scope = await tool.authScope(toolEnv(tool, this.#env));
    return `a:${(await sha256Hex(`${tool.provider}\n${scope}`)).slice(0, 32)}`;
  }
}

/**
 * The provider said a call's credentials changed (`auth_scope_changed`): the
 * scope is re-resolved once and the call re-claimed under the new scope's
 * receipt key, with a log line. If the scope did not change, the call fails
 * retryably with the provider's error.
 */
export class AuthScopeChange {
  #scopes: AuthScopes;
  #log: Log;

  constructor(options: { scopes: AuthScopes; log: Log }) {
    this.#scopes = options.scopes;
    this.#log = options.log;
  }

  /** The new scope digest to re-claim under. */
  async rescope(tool: AnyTool, stale: string, error: { code: string; message: string }): Promise<string> {
    const next = await this.#scopes.refresh(tool, stale);
    if (next === stale) {
      throw new ToolCallError({
        code: error.code,
        message: `${error.message} (the auth scope re-resolved to the same credentials)`,
        retryable: true,
      });
    }
    this.#log(
      `${tool.id}: the provider says the credentials changed mid-run; re-resolved the auth scope and re-claimed the call under the new scope`,
      "auth_rescoped",
    );
    return next;
  }
}
