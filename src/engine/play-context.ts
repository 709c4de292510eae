/** The engine behind `PlayContext`: what a play's `run(ctx, input)` calls. */
import type { DatasetHandle, FieldSet, MapOptions, PlayContext, Row, ToolCallOptions } from "../play/types";
import type { MapRunner } from "./map-runner";
import type { ToolScheduler } from "./tool-scheduler";

export class RunContext implements PlayContext {
  readonly runId: string;
  readonly org: string;
  #maps: MapRunner;
  #scheduler: ToolScheduler | null = null;
  #attemptSeq: () => number;
  #log: (line: string) => void;

  constructor(options: { runId: string; org: string; maps: MapRunner; attemptSeq: () => number; log(line: string): void }) {
    this.runId = options.runId;
    this.org = options.org;
    this.#maps = options.maps;
    this.#attemptSeq = options.attemptSeq;
    this.#log = options.log;
  }

  map(name: string, rows: readonly Row[], fields: FieldSet, options?: MapOptions): Promise<DatasetHandle> {
    return this.#maps.map(name, rows, fields, options);
  }

  tool<T = any>(toolId: string, input: unknown, options?: ToolCallOptions): Promise<T> {
    if (!this.#scheduler) {
      const attemptSeq = this.#attemptSeq();
      const attempt = { attemptId: `${this.runId}/play/${attemptSeq}`, runId: this.runId, attemptSeq };
      this.#scheduler = this.#maps.scheduler(attempt, this.#maps.guards());
    }
    return this.#scheduler.call(toolId, input, options) as Promise<T>;
  }

  log(...args: unknown[]): void {
    this.#log(args.map((a) => (typeof a === "string" ? a : safeStringify(a))).join(" "));
  }
}

function safeStringify(value: unknown): string {
  try {
    return JSON.stringify(value) ?? String(value);
  } catch {
    // Cycles and BigInts still deserve a log line.
    return String(value);
  }
}
