"""Every storelib error raised inside a real Spark task ends a command as it would on the driver:
the same one line and the same exit status (issue 37 item 3), recognised by class (the note
``errors.RocketlakeError`` adds to its traceback), not by a module path in the task's text.

One RDD of one partition per error class; each partition's task raises its class (one small job
per partition, on the shared session), plus one DataFrame task (mapInArrow: PythonException)."""
from __future__ import annotations

import sys

import pytest

from storelib import errors
from storelib.cli import failures

CLASSES = sorted((c for c in vars(errors).values()
                  if isinstance(c, type) and issubclass(c, errors.RocketlakeError)), key=lambda c: c.__name__)
VOICES = {name: getattr(failures, name) for name in failures.__all__ if isinstance(getattr(failures, name),
                                                                                     failures.Voice)}


def _raise(name: str):
    """The error of class ``name`` as a task raises it (built where it is raised)."""
    from storelib import errors as e
    cls = getattr(e, name)
    if issubclass(cls, e.CorruptStore):
        raise cls("commitlog/00000000000000000000", 7, f"{name} in a task")
    if issubclass(cls, e.InputError):
        raise cls([f"in.jsonl line 3: {name} in a task"])
    raise cls(f"{name} in a task")


def _driver_error(name: str) -> errors.RocketlakeError:
    try:
        _raise(name)
    except errors.RocketlakeError as e:
        return e
    raise AssertionError(name)


@pytest.fixture(scope="module")
def task_errors(spark):
    """class name -> (the error the driver got from a task that raised it, one with its text)."""
    from pyspark import cloudpickle
    cloudpickle.register_pickle_by_value(sys.modules[__name__])     # workers cannot import tests/
    sc = spark.sparkContext
    sc.setLogLevel("OFF")                            # the executors' log of each failed task
    names = [c.__name__ for c in CLASSES]
    rdd = sc.parallelize(names, len(names)).mapPartitions(lambda it: [_raise(n) for n in it])
    got = {}
    try:
        for i, name in enumerate(names):
            with pytest.raises(Exception) as e:
                sc.runJob(rdd, lambda it: list(it), [i])
            got[name] = e.value, RuntimeError(str(e.value))   # (str() of a Py4J error asks the JVM)
    finally:
        sc.setLogLevel("ERROR")
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    return got


def test_every_error_class_is_covered():
    assert len(CLASSES) >= 25 and errors.NoSuchBatch in CLASSES and errors.RocketlakeError in CLASSES


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_a_task_error_ends_a_command_as_on_the_driver(task_errors, cls, capsys):
    spark_error, wrapped = task_errors[cls.__name__]
    assert not isinstance(spark_error, errors.RocketlakeError)      # it arrives as Spark's error ...
    rebuilt = errors.from_task(spark_error)
    assert type(rebuilt) is cls                                      # ... and is rebuilt by class
    here = _driver_error(cls.__name__)
    assert errors.exit_code(spark_error) == cls.exit_status == errors.exit_code(here)
    capsys.readouterr()
    assert failures.fail(spark_error, failures.WRITER) == cls.exit_status
    assert capsys.readouterr().err == failures.line(here, failures.WRITER)[1] + "\n"
    for name, voice in VOICES.items():
        status, text = failures.line(wrapped, voice)
        assert (status, text) == failures.line(here, voice), name
        capsys.readouterr()
        assert failures.fail(wrapped, voice) == status
        err = capsys.readouterr().err
        assert err == text + "\n", name                             # no traceback, nothing else
        assert err.startswith("error: ") and f"{cls.__name__} in a task" in err.splitlines()[-1]
        assert "Traceback" not in err and "storelib." not in err and "Py4J" not in err


def test_a_dataframe_task_error(spark, capsys):
    """A pandas/Arrow UDF's error reaches the driver as pyspark's PythonException."""
    def boom(batches):
        from storelib.errors import StorePathError
        for _b in batches:
            raise StorePathError("'../x' leads out of the store")
        yield from ()
    spark.sparkContext.setLogLevel("OFF")
    try:
        with pytest.raises(Exception) as e:
            spark.range(1, numPartitions=1).mapInArrow(boom, "id long").collect()
    finally:
        spark.sparkContext.setLogLevel("ERROR")
    capsys.readouterr()
    assert failures.fail(e.value, failures.QUERY) == 1
    assert capsys.readouterr().err == "error: query failed: '../x' leads out of the store\n"
