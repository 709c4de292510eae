/**
 * Collects operations for a short window and sends them as one call per
 * group (a shard), so a chunk costs one RPC per shard per phase, not one per
 * row. Each caller gets its own item's result back.
 */
export interface BulkQueueOptions<Item, Result> {
  /** How long the first queued item waits for company. */
  flushMs: number;
  /** A group is sent at once when it reaches this many items. */
  maxBatch: number;
  /** Sends one group; returns one result per item, in order. */
  send(group: string, items: Item[]): Promise<Result[]>;
}

interface Pending<Item, Result> {
  item: Item;
  resolve(result: Result): void;
  reject(error: unknown): void;
}

export class BulkQueue<Item, Result> {
  #options: BulkQueueOptions<Item, Result>;
  #groups = new Map<string, Pending<Item, Result>[]>();
  #timer: ReturnType<typeof setTimeout> | null = null;

  constructor(options: BulkQueueOptions<Item, Result>) {
    this.#options = options;
  }

  push(group: string, item: Item): Promise<Result> {
    return new Promise<Result>((resolve, reject) => {
      let pending = this.#groups.get(group);
      if (!pending) this.#groups.set(group, (pending = []));
      pending.push({ item, resolve, reject });
      if (pending.length >= this.#options.maxBatch) this.#send(group);
      else this.#timer ??= setTimeout(() => this.flush(), this.#options.flushMs);
    });
  }

  /** Sends everything queued now. */
  flush(): void {
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = null;
    for (const group of [...this.#groups.keys()]) this.#send(group);
  }

  #send(group: string): void {
    const pending = this.#groups.get(group);
    this.#groups.delete(group);
    if (!pending?.length) return;
    this.#options.send(group, pending.map((p) => p.item)).then(
      (results) => {
        if (results.length !== pending.length) {
          const error = new Error(`bulk ${group}: ${results.length} results for ${pending.length} items`);
          for (const p of pending) p.reject(error);
          return;
        }
        pending.forEach((p, i) => p.resolve(results[i]!));
      },
      (error: unknown) => {
        for (const p of pending) p.reject(error);
      },
    );
  }
}
