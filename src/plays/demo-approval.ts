import { z } from "zod";
import { definePlay } from "../play/define";

/**
 * API.md's waiting demo: logs the message, then waits (status `waiting`, no
 * cost) for `POST /v1/runs/<id>/signals/approve`, and returns its data.
 */
export const demoApproval = definePlay({
  name: "demo-approval",
  description: "Logs the message and waits for the signal approve (POST /v1/runs/<id>/signals/approve); returns { approved: <its data> }.",
  datasets: [],
  input: z
    .object({
      message: z.string().max(10_000),
      timeoutMs: z
        .number()
        .int()
        .positive()
        .max(30 * 24 * 3600 * 1000)
        .optional(),
    })
    .strict(),
  async run(ctx, input) {
    ctx.log(input.message);
    const approved = await ctx.waitForEvent("approve", { timeoutMs: input.timeoutMs });
    return { approved };
  },
});
