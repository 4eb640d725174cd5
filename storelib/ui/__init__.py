"""The store browser: ``rocketlake ui --store S``, a local read-only web page over one store.

It sits above ``cli`` (the page shows the command line's own answers: its lookups, its CSV, its
one-line errors) and starts no Spark: every page is answered by the shell paths a single lookup
uses (``read.query``, ``ops.inspect``, ``table.manifest``, ``verify.driver``).

    storeview  the store a request reads: a fresh committed snapshot, the one-line errors
    history    batches, their Delta versions, a queue's offsets over time, the segment map
    lookup     find a message (key, id, unique key, queue offset, store-time range), CSV, hex
    health     the last verify run from the page, a quick verify of one file
    server     the Flask application (pages, downloads, the pinned plotly.js)
    command    ``rocketlake ui`` (arguments, the store check, serving)
"""
__all__: list = []
