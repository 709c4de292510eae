/** The tools bundled with the Worker. */
import type { ToolDefinition } from "../play/types";
import { simFindEmail, simVerifyEmail } from "./sim-tools";
import { testTools } from "./test-tools";

const simTools: ToolDefinition[] = [simFindEmail, simVerifyEmail];

/**
 * The tools available under `env`: the simulated ones only when `SIM_PROVIDER`
 * is `on`, and the test ones only under the test runner as well.
 */
export function toolRegistry(env: Env): ReadonlyMap<string, ToolDefinition> {
  const tools = env.SIM_PROVIDER !== "on" ? [] : env.TROUPE_TEST_MODE === "on" ? [...simTools, ...(testTools as ToolDefinition[])] : simTools;
  return new Map(tools.map((t) => [t.id, t]));
}
