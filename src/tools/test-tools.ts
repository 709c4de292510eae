/** Tools that exist only under the test runner (TROUPE_TEST_MODE), to exercise dispatch's edges. */
import { faultProbeFor } from "../testing/faults";
import { simFindEmail } from "./sim-tools";
import { defineTool } from "../play/define";

/**
 * `sim_find_email` under a credential the test controls: its auth scope is
 * the `sim` credential held by the FaultInjector (a fault rule can rotate it
 * and answer `auth_scope_changed`, as a provider would after a key rotation).
 */
export const testScopedFind = defineTool({
  ...simFindEmail,
  id: "test_scoped_find",
  authScope: async (env) => `test-credential:${(await faultProbeFor(env).credential("sim")) ?? "none"}`,
});

export const testTools = [testScopedFind];
