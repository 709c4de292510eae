/** The tools bundled with the Worker. */
import type { ToolDefinition } from "../play/types";
import { simFindEmail, simVerifyEmail } from "./sim-tools";

const simTools: ToolDefinition[] = [simFindEmail, simVerifyEmail];

/** The tools available under `env`: the simulated ones only when `SIM_PROVIDER` is `on`. */
export function toolRegistry(env: Env): ReadonlyMap<string, ToolDefinition> {
  const tools = env.SIM_PROVIDER === "on" ? simTools : [];
  return new Map(tools.map((t) => [t.id, t]));
}
