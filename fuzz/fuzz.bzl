"""Macros of fuzz/BUILD."""

def fz_driver_test(name, driver, inputs, data, runs = None, seed = None, budget = None):
    """An sh_test of tests/run_driver.sh: the standalone driver `driver` (a label in this package)
    replays the case files under `inputs` (workspace paths) and, with runs, generates that many
    more from seed; no finding may appear.

    data: the labels that hold `inputs`. budget: the size budget (fuzz/README.md) as a dict
    seq, dim, batch, heads -> FLASHCHECK_MAX_SEQ, _DIM, _BATCH, _HEADS; None: the driver's default.
    """
    args = ["$(location %s)" % driver]
    if runs != None:
        args.append("-runs=%d" % runs)
    if seed != None:
        args.append("-seed=%d" % seed)
    env = {}
    if budget:
        env = {
            "FLASHCHECK_MAX_SEQ": str(budget["seq"]),
            "FLASHCHECK_MAX_DIM": str(budget["dim"]),
            "FLASHCHECK_MAX_BATCH": str(budget["batch"]),
            "FLASHCHECK_MAX_HEADS": str(budget["heads"]),
        }
    native.sh_test(
        name = name,
        size = "medium",
        srcs = ["tests/run_driver.sh"],
        args = args + inputs,
        data = [driver] + data,
        env = env,
    )
