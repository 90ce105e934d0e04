# Shared helpers: config lookups and input functions used by the rule files.

LIBRARY = "workflow/svbop"


def library_sources(*modules):
    """Library files a rule depends on, so that a code change reruns what it affects."""
    return [f"{LIBRARY}/{m}.py" for m in ("__init__",) + modules]


def utility_tables():
    return expand(
        "results/tables/utility_properties_K{K}.tsv", K=config["utility_table"]["K"]
    )
