"""Running jobs: the JVM class-data archive, numba warm-up, progress lines, named fault points and
the Spark-free local runner.
"""
