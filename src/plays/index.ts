/** The plays bundled with the Worker, by name. */
import type { PlayDefinition } from "../play/types";
import { demoAccounts } from "./demo-accounts";
import { demoApproval } from "./demo-approval";
import { demoEnrich } from "./demo-enrich";
import { testPlays } from "./testing";
import {
  testChildBesideCall,
  testChildFallback,
  testChildThenEnrich,
  testMapOneChild,
  testChildTimeouts,
  testDetachedChild,
  testUnawaitedMap,
  testEnrichInTwo,
  testFetch,
  testFragileRows,
  testMutating,
  testPadded,
  testPlayCall,
  testResult,
  testReturnBesideCall,
  testRowChildFallback,
  testRunChild,
  testStages,
  testThrowingRows,
  testOuterFields,
  testTwoInputs,
  testWaitFallback,
} from "./testing-extra";

/** The demo plays: they call the simulated provider's tools, so they exist only where it is on. */
const demoPlays: PlayDefinition[] = [demoEnrich as PlayDefinition, demoAccounts as PlayDefinition, demoApproval as PlayDefinition];

/**
 * The plays listed and runnable under `env`: the demo plays only when
 * `SIM_PROVIDER` is `on`, the test plays only under the test runner.
 */
export function playRegistry(env: Env): ReadonlyMap<string, PlayDefinition> {
  const list = [
    ...(env.SIM_PROVIDER === "on" ? demoPlays : []),
    ...(env.TROUPE_TEST_MODE === "on"
      ? ([
          ...testPlays,
          testStages,
          testResult,
          testMutating,
          testPadded,
          testPlayCall,
          testFragileRows,
          testChildBesideCall,
          testChildFallback,
          testChildThenEnrich,
          testMapOneChild,
          testDetachedChild,
          testUnawaitedMap,
          testChildTimeouts,
          testReturnBesideCall,
          testEnrichInTwo,
          testRunChild,
          testRowChildFallback,
          testThrowingRows,
          testOuterFields,
          testFetch,
          testTwoInputs,
          testWaitFallback,
        ] as PlayDefinition[])
      : []),
  ];
  return new Map(list.map((p) => [p.name, p]));
}
