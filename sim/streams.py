"""Async helpers for Amaranth simulator testbenches: move one beat over a stream."""


async def stream_put(ctx, stream, payload):
    """Offer ``payload`` on ``stream`` and return after the transfer."""
    ctx.set(stream.valid, 1)
    ctx.set(stream.payload, payload)
    await ctx.tick().until(stream.ready)
    ctx.set(stream.valid, 0)


async def stream_get(ctx, stream):
    """Accept one beat from ``stream`` and return its payload."""
    ctx.set(stream.ready, 1)
    payload, = await ctx.tick().sample(stream.payload).until(stream.valid)
    ctx.set(stream.ready, 0)
    return payload
