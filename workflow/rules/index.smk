# Index: SVBOP-HSG's HNSW graph (NMSLIB) over the flat model's class weight vectors, with the
# bias as an extra coordinate, in an inner-product space; M and efConstruction from config.
# Built with one thread the graph is reproducible (nmslib's layer draws are per thread); more
# threads build faster but a different graph every run.


rule build_index:
    input:
        model="results/{dataset}/models/flat.npz",
        code=library_sources("linear", "index"),
    output:
        index="results/{dataset}/indexes/hnsw.bin",
        data="results/{dataset}/indexes/hnsw.bin.dat",
        sidecar="results/{dataset}/indexes/hnsw.bin.json",
        info="results/{dataset}/indexes/hnsw.json",
    params:
        # only what shapes the graph: a change of k or ef (query time) must not rebuild it
        hsg=lambda wc: {key: dataset_config(wc)["hsg"][key] for key in ("M", "efC")},
    threads: lambda wc: dataset_config(wc)["hsg"]["threads"]
    resources:
        mem_mb=lambda wc: dataset_config(wc)["hsg"]["mem_mb"],
        runtime=lambda wc: dataset_config(wc)["hsg"]["runtime"],
    log:
        "results/logs/build_index/{dataset}.log",
    benchmark:
        "results/benchmarks/build_index/{dataset}.tsv"
    conda:
        "../../envs/svbop.yaml"
    script:
        "../scripts/build_index.py"
