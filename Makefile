# rocketlake: `make demo` and `make test` set everything up from a clean clone.
# Needs only Python 3.11, Java 17 and make; everything else goes into .venv/ from requirements.txt.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.install-stamp
KERNELS_STAMP := $(VENV)/.kernels-warm
SUBMIT_HOOK := $(VENV)/.submit-hook-stamp
SPARK_ENV := PYSPARK_PYTHON=$(abspath $(PY)) PYSPARK_DRIVER_PYTHON=$(abspath $(PY))
# A cold ingest's JVM mostly waits on Python: C1 only and Spark's class-data archive, built by
# install (storelib/runtime/jvm_archive.py); without the archive, C1 only.
JOB_JVM_OPTS = $(shell $(PY) -m storelib.runtime.jvm_archive 2>/dev/null)
SUBMIT = $(SPARK_ENV) $(VENV)/bin/spark-submit --master 'local[2]' \
	--conf spark.ui.showConsoleProgress=false --conf spark.ui.enabled=false \
	--driver-java-options "$(JOB_JVM_OPTS) -Dlog4j.configurationFile=$(abspath conf/log4j2.properties)"
DEMO_STORE ?= demo-store
# delta-spark's jars (storelib/table/delta_spark.py) from Maven Central: conf/jars/delta/pom.xml resolved
# by mvn into .cache/m2, its runtime jars copied to .cache/jars/delta-spark/ (.cache/ is git-ignored).
# The stamp makes a second run fetch nothing; with a stamp (the pom changed) mvn first tries offline (-o).
# `make check` needs no Maven (no Spark in its tests).
M2 := $(abspath .cache/m2)
DELTA_JARS := .cache/jars/delta-spark
DELTA_STAMP := .cache/jars/delta-spark.stamp

.PHONY: install fuse3 demo test test-fast check crash mirror bench bench-anchor bench-scale bench-table bench-small-batches bench-cluster-sim clean check-java \
	rocketmq fidelity repair-fidelity kafka streaming bench-streaming faults long jvm-reader s3proxy hdfs backends ops-sequences \
	s3a jvm-objstores bench-objread bench-backends

check-java:
	@command -v java >/dev/null 2>&1 || { echo "error: Java 17 is required (java not found on PATH); install a JDK 17 and retry" >&2; exit 1; }
	@java -version 2>&1 | head -1 | grep -Eq '"(17|1[89]|2[0-9])' || { echo "error: Java 17 or newer is required, found: $$(java -version 2>&1 | head -1)" >&2; exit 1; }

install: check-java fuse3 chromium $(STAMP) $(DELTA_STAMP) $(SUBMIT_HOOK) jvm-reader $(KERNELS_STAMP)

# numba compiles storelib's kernels on first use and caches them: compiled here, once per change of
# the sources, instead of in a user's first command (storelib/cli/warmcache.py).
$(KERNELS_STAMP): $(STAMP) $(shell find storelib -name '*.py' 2>/dev/null)
	@$(PY) -m storelib.cli.warmcache || echo "note: the kernels above compile on first use instead" >&2
	@touch $@

# The JVM reader of spark.read.format("rocketmq") (jvm/src), compiled with the JDK's javac against
# pyspark's jars into a jar beside the virtualenv, keyed by its sources (storelib/runtime/jvmjar.py).
jvm-reader: $(STAMP)
	@$(PY) -m storelib.runtime.jvmjar --build >/dev/null

# The crash simulator (tests/support/crashfs) mounts a FUSE file system through mfusepy, which needs
# libfuse3 and fusermount3 from Debian's fuse3. Installed here when missing and we are root;
# never fatal: without it the crash tests skip and say why.
fuse3:
	@if ldconfig -p 2>/dev/null | grep -q 'libfuse3\.so\.3' && command -v fusermount3 >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing fuse3 (libfuse3, fusermount3) for tests/support/crashfs"; \
		export DEBIAN_FRONTEND=noninteractive; \
		apt-get install -y -qq fuse3 >/dev/null 2>&1 || \
		{ apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq fuse3 >/dev/null 2>&1; } || \
		echo "warning: could not install fuse3; the tests under tests/support/crashfs will skip" >&2; \
	else echo "note: fuse3 (libfuse3) is missing and cannot be installed here; tests/support/crashfs will skip" >&2; fi

# The store browser's tests (tests/ui) drive Debian's Chromium headless through its chromedriver
# (Selenium from requirements.txt); a browser fetched by a Python or npm package cannot be had.
# fonts-wqy-zenhei: the screenshots show the test store's Chinese keys and tags as characters.
# Installed here when missing and we are root; never fatal: without them tests/ui skips and says why.
.PHONY: chromium ui-screenshots
chromium:
	@if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing chromium and chromium-driver for tests/ui"; \
		export DEBIAN_FRONTEND=noninteractive; \
		apt-get install -y -qq chromium chromium-driver fonts-wqy-zenhei >/dev/null 2>&1 || \
		{ apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq chromium chromium-driver fonts-wqy-zenhei >/dev/null 2>&1; } || \
		echo "warning: could not install chromium; the tests under tests/ui will skip" >&2; \
	else echo "note: chromium / chromedriver are missing and cannot be installed here; tests/ui will skip" >&2; fi

# The README's pictures of `rocketlake ui` (docs/ui/*.png), taken by tests/ui in headless Chromium.
ui-screenshots: install
	ROCKETLAKE_UI_SCREENSHOTS=$(abspath docs/ui) $(SPARK_ENV) $(PY) -m pytest -q -n 0 $(PYTEST_ARGS) tests/ui

$(DELTA_STAMP): conf/jars/delta/pom.xml
	@command -v mvn >/dev/null 2>&1 || { echo "error: Maven (mvn) is required to fetch delta-spark's jars" >&2; exit 1; }
	rm -rf $(DELTA_JARS).tmp
	mvn -B -q -Dstyle.color=never $(if $(wildcard $(DELTA_STAMP)),-o) -f conf/jars/delta/pom.xml -Dmaven.repo.local=$(M2) \
		dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory=$(abspath $(DELTA_JARS).tmp) >/dev/null 2>&1 \
	|| mvn -B -q -Dstyle.color=never -f conf/jars/delta/pom.xml -Dmaven.repo.local=$(M2) \
		dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory=$(abspath $(DELTA_JARS).tmp)
	rm -rf $(DELTA_JARS) && mv $(DELTA_JARS).tmp $(DELTA_JARS)
	@touch $@

# The class-data archive, built once per java and pyspark, and the spark-submit hook: a plain
# `spark-submit jobs/ingest.py` gets the cold-job JVM options through the spark-env.sh hook written
# into the venv's pyspark (storelib/runtime/submit_hook.py); rewritten when it changes.
$(SUBMIT_HOOK): $(STAMP) storelib/runtime/submit_hook.py storelib/runtime/jvm_archive.py
	$(SPARK_ENV) $(PY) -m storelib.runtime.jvm_archive --build >/dev/null
	@touch $@

$(STAMP): requirements.txt requirements-dev.txt pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt -r requirements-dev.txt
	$(PY) -m pip install -q --no-deps -e .
	@touch $(STAMP)

demo: install
	rm -rf $(DEMO_STORE)
	$(SUBMIT) jobs/ingest.py --store $(DEMO_STORE) --input samples/messages.jsonl --format jsonl \
		--config conf/demo.properties --json-summary $(DEMO_STORE).summary.json
	$(SPARK_ENV) $(PY) jobs/demo_report.py --store $(DEMO_STORE) --config conf/demo.properties \
		--summary $(DEMO_STORE).summary.json

# The suite runs on TEST_WORKERS pytest-xdist workers (-n 0: in this process, no xdist). Many
# tests mostly wait on JVM start-ups and subprocesses, so two workers overlap well on two cores;
# tests/conftest.py decides what runs together and hands out the longest tests first.
TEST_WORKERS ?= 2
PYTEST_ARGS ?=
test: setup
	$(SPARK_ENV) $(PY) -m pytest -q -n $(TEST_WORKERS) $(PYTEST_ARGS) tests

# What `make test` needs before pytest starts (install rocketmq kafka s3proxy hdfs), in two sides at
# once, for neither needs the other: setup-venv, the virtualenv and what is built from it (pip, then
# the class-data archive, the JVM reader and numba's kernels at once: PyPI and CPU), and setup-jars,
# every jar from Maven Central (delta-spark, RocketMQ, Kafka, S3Proxy, the HDFS mini cluster: mvn and
# the system Python, mostly waiting on the network). A make of its own per step keeps the steps of a
# side one at a time whatever job slots are free: the mvn runs share .cache/m2, which Maven 3.8 does
# not lock against concurrent writers, and fuse3 and chromium share dpkg's lock. make itself checks
# both sides' exit codes and names a failed one; `make -n setup` lists the steps in one make, in order.
DRY_RUN := $(findstring n,$(firstword -$(MAKEFLAGS)))
DRY_SETUP := fuse3 chromium setup-pip setup-builds setup-delta rocketmq kafka s3proxy hdfs
.PHONY: setup setup-venv setup-pip setup-builds setup-jars setup-delta
setup: check-java
	@$(MAKE) --no-print-directory $(if $(DRY_RUN),$(DRY_SETUP),-j4 setup-venv setup-jars)
setup-venv:
	@$(MAKE) --no-print-directory fuse3 && $(MAKE) --no-print-directory chromium && \
	$(MAKE) --no-print-directory setup-pip && $(MAKE) --no-print-directory setup-builds
setup-jars:
	@$(MAKE) --no-print-directory setup-delta && $(MAKE) --no-print-directory rocketmq && \
	$(MAKE) --no-print-directory kafka && $(MAKE) --no-print-directory s3proxy && $(MAKE) --no-print-directory hdfs
# (`@:`: nothing of their own to do, and no "is up to date" line when their steps are)
setup-pip: $(STAMP)
	@:
setup-builds: $(SUBMIT_HOOK) jvm-reader $(KERNELS_STAMP)
	@:
setup-delta: $(DELTA_STAMP)
	@:

# RocketMQ's own jars (5.3.3, 4.9.8, the newest 5.x, 4.9.7's broker) from Maven Central through mvn, pinned by
# tests/rocketmq/pom-<version>.xml, into .cache/m2 and .cache/jars/rocketmq-<version>/ (git-ignored);
# a stamp per version: a second run fetches nothing. RMQ_ALLOW_SKIP=1: without mvn or Maven
# Central, warn and go on (the RocketMQ tests then skip, saying why). `make check` never needs it.
rocketmq:
	@PYTHONPATH=tests $(PYTHON) -m support.rmqjars fetch || { test -n "$(RMQ_ALLOW_SKIP)" && echo "warning: RocketMQ jars unavailable; its tests will skip" >&2; }

# Kafka (a KRaft broker) and Spark's Kafka source from Maven Central through mvn, pinned by
# tests/kafka/pom-*.xml, into .cache/m2 and .cache/jars/{kafka-broker,spark-kafka}/ (git-ignored),
# behind a stamp per set: a second run fetches nothing. RMQ_ALLOW_SKIP=1 also lets these be missing
# (the streaming tests then skip, saying why).
kafka:
	@PYTHONPATH=tests $(PYTHON) -m support.kafkajars fetch || { test -n "$(RMQ_ALLOW_SKIP)" && echo "warning: Kafka jars unavailable; the streaming tests will skip" >&2; }

# S3Proxy (a real S3-compatible server, Apache-2.0) from Maven Central through mvn, pinned by
# tests/s3proxy/pom-<version>.xml (4.0.0 honours conditional puts, 2.6.0 does not), into .cache/m2 and
# .cache/jars/s3proxy-<version>/ (git-ignored), behind a stamp. RMQ_ALLOW_SKIP=1: its tests then skip.
s3proxy:
	@PYTHONPATH=tests $(PYTHON) -m support.s3server fetch || { test -n "$(RMQ_ALLOW_SKIP)" && echo "warning: S3Proxy jars unavailable; its tests will skip" >&2; }

# Hadoop's HDFS mini cluster (hadoop-client-minicluster of pyspark's Hadoop line) from Maven Central,
# pinned by tests/hdfs/pom-minicluster.xml, into .cache/jars/hdfs-minicluster/, and its launcher
# (tests/hdfs/HdfsMini.java) compiled by javac beside it.
hdfs:
	@PYTHONPATH=tests $(PYTHON) -m support.hdfscluster fetch || { test -n "$(RMQ_ALLOW_SKIP)" && echo "warning: the HDFS mini cluster is unavailable; its tests will skip" >&2; }

# S3A (hadoop-aws at pyspark's Hadoop version and its AWS SDK bundle, jvm/pom-s3a.xml) into
# .cache/jars/hadoop-aws-3.4.2/: the JVM reader on s3:// stores, and Spark's own readers there.
S3A_DIR := .cache/jars/hadoop-aws-3.4.2
s3a: $(S3A_DIR)/.pom
$(S3A_DIR)/.pom: jvm/pom-s3a.xml
	rm -rf $(S3A_DIR).tmp && mvn -B -q -f jvm/pom-s3a.xml -Dmaven.repo.local=$(CURDIR)/.cache/m2 \
		dependency:copy-dependencies -DoutputDirectory=$(CURDIR)/$(S3A_DIR).tmp
	rm -rf $(S3A_DIR) && mv $(S3A_DIR).tmp $(S3A_DIR) && cp jvm/pom-s3a.xml $@

# The JVM reader on a store in S3 (moto) and on HDFS (the mini cluster) against the Python reader (~5 min).
jvm-objstores: install s3a hdfs
	ROCKETLAKE_BACKENDS=1 $(SPARK_ENV) $(PY) -m pytest -q -n 0 $(PYTEST_ARGS) tests/read/test_jvm_reader_objstore.py

# Reading a store on S3 (S3Proxy) against Spark's Parquet reader on the same server (bench/objread.py),
# cold and warm, bytes read beside the bytes needed: BENCH_ARGS="--n 1000000 --rounds 3".
bench-objread: install s3a s3proxy
	$(SPARK_ENV) $(PY) bench/objread.py $(BENCH_ARGS)

# Every storage backend at length (~12 min): hdfs:// stores and inputs on the HDFS mini cluster
# (tests/e2e/test_hdfs.py; make test: its file operations and Delta commits only), and on S3Proxy
# all three race rounds, every kill point and the two-batch golden ingest (make test: the ordered
# race round and one kill point; the golden ingest on moto), beside moto's.
backends: install s3proxy hdfs
	ROCKETLAKE_BACKENDS=1 $(SPARK_ENV) $(PY) -m pytest -q -n 0 $(PYTEST_ARGS) tests/e2e/test_s3proxy.py tests/e2e/test_hdfs.py tests/e2e/test_backends_bench.py

# The streaming tests with their long cases too (the Kafka query killed twice, make test: once;
# the tailing reader under load).
streaming: install kafka
	ROCKETLAKE_STREAMING_FULL=1 $(SPARK_ENV) $(PY) -m pytest -q -n 0 $(PYTEST_ARGS) tests/e2e/test_streaming.py tests/read/test_stream_source.py

# Streaming latency and throughput, beside a Kafka -> Delta query of the same messages (bench/streaming.py).
bench-streaming: install kafka
	$(SPARK_ENV) $(PY) bench/streaming.py $(BENCH_ARGS)

# The differential suites alone, with many cases: make fidelity N=5000 [N_OTHER=500] [N_QUERY=300] [SEED=...]
N ?= 2000
N_OTHER ?= 200
N_QUERY ?= 100
SEED ?= 20261126
fidelity: install rocketmq
	RMQ_CASES=$(N) RMQ_CASES_OTHER=$(N_OTHER) RMQ_QUERY_CASES=$(N_QUERY) RMQ_SEED=$(SEED) $(SPARK_ENV) $(PY) -m pytest -q -s -n 0 \
		$(PYTEST_ARGS) tests/e2e/test_rocketmq_differential.py tests/e2e/test_query_differential.py

# repair against RocketMQ itself: a broker serves a store whose queues, index and checkpoint repair
# rebuilt, and the default-size set damaged and repaired (tests/e2e/test_repair_broker.py, ~4 min).
repair-fidelity: install rocketmq
	ROCKETLAKE_REPAIR_FIDELITY=1 $(SPARK_ENV) $(PY) -m pytest -q -s -n 0 $(PYTEST_ARGS) tests/e2e/test_repair_broker.py

# A running RocketMQ broker mirrored into the lake: steady producer, SIGKILL and restart, retention,
# restore on a broker, delay-level, timer and transactional messages (check-backs too) restored
# exactly once from a middle and the last batch (tests/e2e/test_mirror_broker.py, ~10 min;
# ROCKETLAKE_MIRROR_SECONDS per sending phase), a mirror on the moto S3 server
# (tests/e2e/test_mirror_s3.py, ~2 min), and a new slave of a running master seeded with the
# mirror's export, beside one seeded with another broker's (tests/e2e/test_mirror_slave.py, ~2 min).
mirror: install rocketmq
	ROCKETLAKE_MIRROR=1 $(SPARK_ENV) $(PY) -m pytest -q -s -n 0 $(PYTEST_ARGS) tests/e2e/test_mirror_broker.py \
		tests/e2e/test_mirror_s3.py tests/e2e/test_mirror_slave.py

# The inner loop, no Spark and no Maven: every wing's folder of tests (layouts, codec, golden query
# answers, sequencer, inputs, names, the house rules, ...) except tests/e2e, without the tests marked
# slow (processes of their own) or spark (the in-process SparkSession). `make test` runs everything.
# First the linter and the type checker (ruff, mypy: configured in pyproject.toml).
CHECK_DIRS := $(filter-out tests/e2e/,$(sort $(dir $(wildcard tests/*/test_*.py))))
check: check-java $(STAMP) $(SUBMIT_HOOK)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(SPARK_ENV) $(PY) -m pytest -q -m "not slow and not spark" $(CHECK_DIRS)

test-fast: install
	$(SPARK_ENV) $(PY) -m pytest -q -n $(TEST_WORKERS) $(PYTEST_ARGS) -m "not slow" tests

# Thousands of random sequences of store operations (ingest, append, expire store-wide and per
# topic, repair after damage, export, verify) against the model of the readable messages
# (ROCKETLAKE_OPS_SEQUENCES of them, default 2000; `make test` runs a few, `make long` these too).
ops-sequences: install
	ROCKETLAKE_LONG=1 $(SPARK_ENV) $(PY) -m pytest -q -n $(TEST_WORKERS) $(PYTEST_ARGS) tests/ops/test_ops_sequences.py

# Every long variant at once: every fault point and every power-cut point, the streaming tests' long
# cases, the default-VACUUM maintenance case, the parametrizations `make test` runs one of
# (tests/support/longrun.py), twice the fuzzed readers' examples, 300 differential cases against
# RocketMQ 5.3.3 and 60 against each other line (make test: 120 and 24), the 4.9 line's broker
# (make test: 5.3.3's), beside the rest of the suite.
long: install rocketmq kafka s3proxy hdfs s3a
	ROCKETLAKE_LONG=1 ROCKETLAKE_FAULTS=all CRASH_POINTS=0 ROCKETLAKE_STREAMING_FULL=1 $(SPARK_ENV) $(PY) -m pytest -q \
		-n $(TEST_WORKERS) $(PYTEST_ARGS) tests

# SIGKILL at every fault point of an ingest, then the reruns (make test: 6 of the 16 points), and
# of a batch continuing a store on S3 (make test: 1 of 13), of a per-topic expire on S3 (make test:
# 1 of 8), and of repair (make test: 4 of 16); the
# mirror stalled past its lease and racing every other writer (make test: the stall and one race);
# the manifest table's merge racing an ingest and an expiry (make faults only); racing ingests on
# S3 (moto), all three rounds (make test: on local disk, and the ordered round on S3Proxy); an
# object-store sweep killed at each of its points (make test: one), racing a mirror cycle, holding
# its lease against another writer, and over each kind of damaged sweep state (make test: one kind).
faults: install
	ROCKETLAKE_FAULTS=all $(SPARK_ENV) $(PY) -m pytest -q -n $(TEST_WORKERS) $(PYTEST_ARGS) \
		tests/e2e/test_ingest_faults.py tests/e2e/test_ingest_race.py tests/e2e/test_s3_kills.py tests/e2e/test_s3_merge_kills.py tests/e2e/test_crash_repair.py \
		tests/e2e/test_merge_race.py tests/e2e/test_s3_extent_list_kills.py \
		tests/e2e/test_mirror_crash.py tests/e2e/test_mirror_race.py tests/e2e/test_crash_ops.py \
		tests/e2e/test_crash_compaction.py tests/e2e/test_housekeeping_stall.py tests/e2e/test_expiry_deletes.py \
		tests/e2e/test_commit_outcome_unknown.py tests/e2e/test_s3_topic_expire.py \
		tests/ops/test_object_sweep.py tests/ops/test_sweep_state.py

# The crash simulator at every distinct point of every operation (make test: 35 chosen points and 8 torn states),
# repair's on three stores too (make test: a few points on two).
crash: install
	CRASH_POINTS=0 $(SPARK_ENV) $(PY) -m pytest -q -n $(TEST_WORKERS) $(PYTEST_ARGS) tests/e2e/test_crash_sim.py \
		tests/e2e/test_crash_repair.py tests/e2e/test_mirror_crash.py tests/e2e/test_crash_ops.py \
		tests/e2e/test_crash_compaction.py tests/e2e/test_crash_expiry_deletes.py

# BENCH_ARGS, e.g. --rounds 3 or --only ingest,lookup; results go to bench/results/ (kept in git).
bench: install rocketmq
	$(SPARK_ENV) $(PY) bench/run.py $(BENCH_ARGS)

# The mirror (bench/mirror_bench.py): lag against a live broker at 1k and 10k msg/s with --every 1 and 10,
# catch-up against cp -r + sync at 1M messages, bytes uploaded per ~1 MB cycle into S3 (moto); ratios
# against baselines from the same run. BENCH_ARGS, e.g. --only lag --seconds 60 or --catchup-messages 1000000,10000000;
# --baseline-src DIR times DIR's mirror too (e.g. a copy of main); --producer-threads 4 --batch 8 (the producer's JVM).
.PHONY: bench-mirror
bench-mirror: install rocketmq
	$(SPARK_ENV) $(PY) bench/mirror_bench.py $(BENCH_ARGS)

# RocketMQ's own store writer against rocketlake ingest, same messages (BENCH_ARGS="--anchor-n 2000000").
bench-anchor: install rocketmq
	$(SPARK_ENV) $(PY) bench/run.py --only anchor $(BENCH_ARGS)

# Growth at 2M, 10M, 50M (BENCH_ARGS="--scale-sizes ..."): redraws docs/bench-scale.png.
bench-scale: install
	$(SPARK_ENV) $(PY) bench/run.py --only scale $(BENCH_ARGS)

bench-table:
	$(PY) bench/table.py

# Bytes uploaded per 1,000-message batch into a store on S3, batch after batch (bench/small_batches_s3.py):
# BENCH_ARGS=--full for the 2M-message store and 200 batches, --baseline-src DIR for another tree beside it.
bench-small-batches: install
	$(PY) bench/small_batches_s3.py $(BENCH_ARGS)

# The driver at a real cluster's size, simulated (bench/cluster_sim.py; docs/PERFORMANCE.md): the
# sequencer, commit rows, Delta commits and snapshot loads at 1e8..1e10 messages, no store bytes.
bench-cluster-sim: install
	$(PY) bench/cluster_sim.py $(BENCH_ARGS)

# A 1,000-message batch into a 2M-message store on local disk, moto S3, S3Proxy and HDFS (bench/backends.py):
# wall time, bytes moved per record byte and requests by kind beside the local-disk figure of the same
# run. BENCH_ARGS="--store-n 200000" for a smaller store.
bench-backends: install s3proxy hdfs
	$(PY) bench/backends.py $(BENCH_ARGS)

clean:
	rm -rf $(DEMO_STORE) $(DEMO_STORE).summary.json .pytest_cache spark-warehouse  # keeps .cache/ (jars)
