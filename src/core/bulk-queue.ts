/**
 * Collects operations and sends them as one call per group (a shard), so a
 * chunk costs one RPC per shard per phase, not one per row. Each caller gets
 * its own item's result back.
 *
 * A queue sends when every row worker of the chunk is parked (waiting on a
 * queue, on another call's result, or on a backoff) and none of its provider
 * requests is waiting for a pacing slot or in flight: nobody else can add to
 * the batch then. A timer bounds the wait for stragglers; while the sender
 * still has work in hand (`hold`), the wait stretches, so that a chunk whose
 * requests keep every connection busy sends its receipts in a few large
 * calls rather than one or two per request.
 */
import { getOrInsert } from "./collections";
export interface BulkQueueOptions<Item, Result> {
  /** The longest the first queued item waits for company. */
  maxWaitMs: number;
  /** A group is sent at once when it reaches this many items. */
  maxBatch: number;
  /** Or this much by `sizeOf` (a call carries 32 MiB at most): the item that reaches it goes in the group it fills. */
  maxBatchSize?: { max: number; sizeOf(item: Item): number };
  /** Tracks whether every row worker is parked; absent means timer-only. */
  workers?: WorkerBarrier;
  /**
   * While `busy()` says the sender has enough work in hand that nothing
   * waits on these items yet, a queue whose `maxWaitMs` is up keeps
   * collecting, up to `maxMs` from its first item, or until {@link BulkQueue.nudge}.
   */
  hold?: { busy(): boolean; maxMs: number };
  /** Sends one group; returns one result per item, in order. */
  send(group: string, items: Item[]): Promise<Result[]>;
}

interface Pending<Item, Result> {
  item: Item;
  resolve(result: Result): void;
  reject(error: unknown): void;
}

/**
 * Counts the chunk's row workers that are running and those parked waiting,
 * and the provider requests of the chunk paced or in flight. Listeners hear
 * when everyone is parked and no request is out: a request will wake a
 * worker with more to add (its receipt completion), so a bulk call sent
 * before it returns would go out half empty.
 */
export class WorkerBarrier {
  #active = 0;
  #parked = 0;
  #external = 0;
  #gathered = 0;
  #listeners = new Set<() => void>();
  #onGathered: (() => void) | null = null;

  enter(): void {
    this.#active++;
  }

  leave(): void {
    this.#active--;
    this.#check();
  }

  /** Marks one worker as waiting until `promise` settles. */
  async park<T>(promise: Promise<T>): Promise<T> {
    this.#parked++;
    this.#check();
    try {
      return await promise;
    } finally {
      this.#parked--;
    }
  }

  /** Marks a provider request out (paced or in flight) until `promise` settles (its worker stays parked meanwhile). */
  async external<T>(promise: Promise<T>): Promise<T> {
    this.#external++;
    try {
      return await promise;
    } finally {
      this.#external--;
      this.#check();
    }
  }

  /**
   * `delta` calls joined (or, negative, left) a batch that gathers company
   * (tool-queue.ts): between them they will make one request.
   */
  gather(delta: number): void {
    this.#gathered += delta;
    if (delta > 0) this.#onGathered?.();
  }

  /** Calls waiting in batches that gather company. */
  get gathered(): number {
    return this.#gathered;
  }

  /** Hears each call that joins a gathering batch (one listener: the chunk's drain check). */
  onGathered(listener: () => void): void {
    this.#onGathered = listener;
  }

  get allParked(): boolean {
    return this.#active > 0 && this.#parked >= this.#active && this.#external === 0;
  }

  onAllParked(listener: () => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  #check(): void {
    if (this.allParked) for (const listener of this.#listeners) listener();
  }
}

export class BulkQueue<Item, Result> {
  #options: BulkQueueOptions<Item, Result>;
  #groups = new Map<string, Pending<Item, Result>[]>();
  /** What each group's items add up to by `maxBatchSize.sizeOf`. */
  #sizes = new Map<string, number>();
  #timer: ReturnType<typeof setTimeout> | null = null;
  /** When the oldest item still queued arrived (null: nothing queued since the last send). */
  #since: number | null = null;
  /** The timer is running only because of `hold`: a nudge sends at once. */
  #holding = false;

  constructor(options: BulkQueueOptions<Item, Result>) {
    this.#options = options;
    options.workers?.onAllParked(() => queueMicrotask(() => this.flush()));
  }

  push(group: string, item: Item): Promise<Result> {
    const result = new Promise<Result>((resolve, reject) => {
      const pending = getOrInsert(this.#groups, group, () => []);
      pending.push({ item, resolve, reject });
      this.#since ??= Date.now();
      const bySize = this.#options.maxBatchSize;
      const size = bySize ? (this.#sizes.get(group) ?? 0) + bySize.sizeOf(item) : 0;
      this.#sizes.set(group, size);
      if (pending.length >= this.#options.maxBatch || (bySize && size >= bySize.max)) this.#send(group);
      else this.#timer ??= setTimeout(() => this.#due(), this.#options.maxWaitMs);
    });
    return this.#options.workers ? this.#options.workers.park(result) : result;
  }

  /** Sends everything queued now. */
  flush(): void {
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = null;
    this.#holding = false;
    this.#since = null;
    for (const group of [...this.#groups.keys()]) this.#send(group);
  }

  /** The sender's work in hand ran low: what was only held for company goes now. */
  nudge(): void {
    if (this.#holding) this.flush();
  }

  /** `maxWaitMs` is up: send, unless the sender is busy enough to hold on (up to `hold.maxMs` in all). */
  #due(): void {
    this.#timer = null;
    const hold = this.#options.hold;
    const left = hold && this.#since !== null ? this.#since + hold.maxMs - Date.now() : 0;
    if (left > 0 && hold!.busy()) {
      this.#holding = true;
      this.#timer = setTimeout(() => this.flush(), left);
      return;
    }
    this.flush();
  }

  #send(group: string): void {
    const pending = this.#groups.get(group);
    this.#groups.delete(group);
    this.#sizes.delete(group);
    if (this.#groups.size === 0) this.#since = null;
    if (!pending?.length) return;
    this.#options
      .send(
        group,
        pending.map((p) => p.item),
      )
      .then(
        (results) => {
          if (results.length !== pending.length) {
            const error = new Error(`bulk ${group}: ${results.length} results for ${pending.length} items`);
            for (const p of pending) p.reject(error);
            return;
          }
          for (const [i, p] of pending.entries()) p.resolve(results[i]!);
        },
        (error: unknown) => {
          for (const p of pending) p.reject(error);
        },
      );
  }
}
