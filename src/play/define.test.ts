import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { simFindEmail } from "../tools/sim-tools";
import { defineTool, toolEnv } from "./define";

describe("toolEnv", () => {
  it("hands a tool the bindings it declared and none of the others", () => {
    const seen = toolEnv(simFindEmail, env);
    expect(Object.keys(seen).sort()).toEqual(["SIM", "SIM_API_KEY"]);
    expect(seen.SIM).toBe(env.SIM);
    // The coordinator, the shards and the org directory stay out of reach.
    expect("RUN_COORDINATOR" in seen || "SHEET_SHARD" in seen || "ORG_DIRECTORY" in seen || "API_TOKENS" in seen).toBe(false);
    expect(Object.isFrozen(seen)).toBe(true);
  });

  it("hands a tool that declared nothing an empty env", () => {
    const bare = defineTool({ id: "bare", provider: "none", version: "1", input: simFindEmail.input, execute: async () => null });
    expect(toolEnv(bare, env)).toEqual({});
  });
});
