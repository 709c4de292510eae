import { describe, expect, it } from "vitest";
import type { AnyTool } from "../play/types";
import { BUNDLED_TOOLS, toolRegistry } from "./index";

const envOf = (vars: { SIM_PROVIDER?: string; TROUPE_TEST_MODE?: string }) => vars as unknown as Env;

describe("toolRegistry", () => {
  const real = { ...BUNDLED_TOOLS.simulated[0]!, id: "acme_lookup", provider: "acme" } as AnyTool;
  const bundles = { ...BUNDLED_TOOLS, provider: [real] };

  it("registers real providers' tools whether or not the simulated provider is on", () => {
    expect([...toolRegistry(envOf({}), bundles).keys()]).toEqual(["acme_lookup"]);
    expect([...toolRegistry(envOf({ SIM_PROVIDER: "on" }), bundles).keys()]).toEqual(["acme_lookup", "sim_find_email", "sim_verify_email"]);
  });

  it("adds the test tools only under the test runner with the simulated provider on", () => {
    expect(toolRegistry(envOf({ TROUPE_TEST_MODE: "on" }), bundles).has("test_scoped_find")).toBe(false);
    expect(toolRegistry(envOf({ SIM_PROVIDER: "on", TROUPE_TEST_MODE: "on" }), bundles).has("test_scoped_find")).toBe(true);
  });
});
