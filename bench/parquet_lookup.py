"""The cold baseline for a shell lookup: ``python bench/parquet_lookup.py SRC TOPIC KEY`` finds
the messages of TOPIC whose KEYS hold KEY in the Parquet input with pyarrow (a fresh process,
what a user without the store would run) and prints how many."""
import sys

import pyarrow.compute as pc
import pyarrow.dataset as ds

if __name__ == "__main__":
    src, topic, key = sys.argv[1:4]
    t = ds.dataset(src, format="parquet").to_table(columns=["topic", "properties"],
                                                   filter=ds.field("topic") == topic)
    props = t.column("properties").combine_chunks()
    pairs = props.flatten()
    is_keys = pc.equal(pairs.field("name"), "KEYS")
    tokens = pc.split_pattern(pairs.field("value"), " ")
    flat = pc.list_flatten(tokens)
    parent = pc.list_parent_indices(tokens)
    matched = pc.and_(pc.equal(flat, key), pc.array_take(is_keys, parent))
    rows = pc.list_parent_indices(props).take(pc.unique(parent.filter(matched)))
    print(len(pc.unique(rows)))
