import { describe, expect, it } from "vitest";
import { orgOf, tokenConfig } from "./auth";

const LONG_A = "a".repeat(16);
const LONG_B = "tok_b_0123456789abcdef";
const envOf = (vars: { API_TOKENS?: string; TROUPE_LOCAL_DEV?: string }) => vars as unknown as Env;
const production = (API_TOKENS?: string) => envOf({ API_TOKENS });
const local = (API_TOKENS?: string) => envOf({ API_TOKENS, TROUPE_LOCAL_DEV: "on" });
const withBearer = (token: string) => new Request("https://troupe.test/v1/runs", { headers: { Authorization: `Bearer ${token}` } });

describe("tokenConfig", () => {
  it("accepts only dev-token, as org dev, when API_TOKENS is unset in local development", () => {
    const config = tokenConfig(local(undefined));
    expect(config).toEqual({ status: "ready", tokens: new Map([["dev-token", "dev"]]) });
    expect(tokenConfig(local(""))).toEqual(config);
  });

  it("refuses everything outside local development when API_TOKENS is unset or empty, saying how to set it", () => {
    for (const source of [undefined, "", "{}"]) {
      const config = tokenConfig(production(source));
      expect(config.status, String(source)).toBe("misconfigured");
      if (config.status === "misconfigured") expect(config.problem).toContain("API_TOKENS");
    }
    const unset = tokenConfig(production(undefined));
    expect(unset.status === "misconfigured" && unset.problem).toContain("wrangler secret put API_TOKENS --env production");
  });

  it("refuses tokens shorter than 16 characters outside local development, without naming them", () => {
    const config = tokenConfig(production(JSON.stringify({ [LONG_A]: "a", hunt2: "b" })));
    expect(config.status).toBe("misconfigured");
    if (config.status !== "misconfigured") return;
    expect(config.problem).toMatch(/shorter than 16 characters/);
    expect(config.problem).not.toContain("hunt2");
    // Nor their orgs: every request, signed in or not, is answered this.
    expect(config.problem).not.toMatch(/\bb\b/);
    expect(tokenConfig(local(JSON.stringify({ "dev-token": "dev", "other-token": "other" }))).status).toBe("ready");
  });

  it("refuses an API_TOKENS that is not a JSON object of token → org", () => {
    for (const source of ["{nope", "[]", JSON.stringify({ [LONG_A]: 7 })]) {
      expect(tokenConfig(production(source)).status, source).toBe("misconfigured");
      expect(tokenConfig(local(source)).status, source).toBe("misconfigured");
    }
  });

  it("maps long tokens to their orgs in production, and never the dev token", () => {
    const config = tokenConfig(production(JSON.stringify({ [LONG_A]: "a", [LONG_B]: "b" })));
    expect(config.status).toBe("ready");
    if (config.status !== "ready") return;
    expect(orgOf(config.tokens, withBearer(LONG_B))).toBe("b");
    expect(orgOf(config.tokens, withBearer("dev-token"))).toBeNull();
    expect(orgOf(config.tokens, withBearer("toString"))).toBeNull();
  });
});

describe("orgOf", () => {
  const tokens = new Map([[LONG_A, "a"]]);

  it("reads the bearer token, and ?token= only where allowed", () => {
    expect(orgOf(tokens, withBearer(LONG_A))).toBe("a");
    expect(orgOf(tokens, new Request(`https://troupe.test/x?token=${LONG_A}`))).toBeNull();
    expect(orgOf(tokens, new Request(`https://troupe.test/x?token=${LONG_A}`), { queryToken: true })).toBe("a");
    expect(orgOf(tokens, new Request("https://troupe.test/x", { headers: { Authorization: `Basic ${LONG_A}` } }))).toBeNull();
  });
});
