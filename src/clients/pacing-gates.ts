/** Callers' side of the pacing gates: one PacingGate per (org, provider), shared by every run of the org. */
import type { SubrequestMeter } from "../core/meter";

/** The name of the PacingGate of one (org, provider). */
export function pacingGateName(org: string, provider: string): string {
  return `${org}/${provider}`;
}

/**
 * The gate of (org, provider); each stub obtained is counted as one subrequest when a meter is given, as a
 * call of `pacing.<method>` (the gate method it is obtained for).
 */
export function pacingGate(env: Pick<Env, "PACING_GATE">, org: string, provider: string, meter?: SubrequestMeter, method = "call") {
  if (meter) meter.countRpc(`pacing.${method}`);
  return env.PACING_GATE.getByName(pacingGateName(org, provider));
}
