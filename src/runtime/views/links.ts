/** The `links` of a run in API answers: where its state, live feed, events and datasets are. */

/** A run's links; `datasets` maps each dataset name to its rows' URL. */
export interface RunLinks {
  self: string;
  live: string;
  events: string;
  datasets: Record<string, string>;
}

/**
 * The links of run `runId` whose datasets are `datasets` (the play's declared
 * ones, plus, once the run has started them, the maps it actually wrote).
 */
export function runLinks(runId: string, datasets: Iterable<string>): RunLinks {
  const self = `/v1/runs/${runId}`;
  const byName: Record<string, string> = {};
  for (const name of datasets) byName[name] = `${self}/datasets/${encodeURIComponent(name)}`;
  return { self, live: `${self}/live`, events: `${self}/events`, datasets: byName };
}
