/** The tools bundled with the Worker. */
import type { AnyTool } from "../play/types";
import { simFindEmail, simVerifyEmail } from "./sim-tools";
import { testTools } from "./test-tools";

/** The bundled tools, by where they may run. */
export interface ToolBundles {
  /** Tools of real providers: registered wherever the Worker runs. */
  provider: readonly AnyTool[];
  /** The simulated provider's tools: only when `SIM_PROVIDER` is `on`. */
  simulated: readonly AnyTool[];
  /** Tools over the simulated provider for the test runner: only when `TROUPE_TEST_MODE` is `on` as well. */
  test: readonly AnyTool[];
}

/** What the Worker ships with. Register a real provider's tool in `provider`. */
export const BUNDLED_TOOLS: ToolBundles = {
  provider: [],
  simulated: [simFindEmail, simVerifyEmail],
  test: testTools as AnyTool[],
};

/** The tools available under `env`, by id (see `ToolBundles` for which are). */
export function toolRegistry(env: Env, bundles: ToolBundles = BUNDLED_TOOLS): ReadonlyMap<string, AnyTool> {
  const simulated = env.SIM_PROVIDER === "on";
  const tools = [
    ...bundles.provider,
    ...(simulated ? bundles.simulated : []),
    ...(simulated && env.TROUPE_TEST_MODE === "on" ? bundles.test : []),
  ];
  return new Map(tools.map((t) => [t.id, t]));
}
