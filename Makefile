# PGXS build of the outbox extension (C++17). `make && make install` builds and
# installs outbox.so, outbox.control and the install/upgrade scripts.
# `make installcheck` runs the pg_regress and isolation suites against the
# server PGHOST/PGPORT point at (test/run_all.sh starts one for them).

EXTENSION = outbox
MODULE_big = outbox
DATA = $(wildcard sql/outbox--*.sql) outbox--0.1.0.control

# PostgreSQL-facing code first, PostgreSQL-free code (also built by CMake for
# the unit tests) after it.
PG_SRCS = src/pg_bridge.cpp src/outbox.cpp src/guc.cpp src/emit.cpp src/event_insert.cpp src/partition.cpp \
          src/sink_catalog.cpp src/shmem.cpp src/launcher.cpp src/worker.cpp src/claim.cpp \
          src/payload_json.cpp src/database_guard.cpp src/restored_partition.cpp src/workers_view.cpp src/key_ownership.cpp \
          src/emit_horizon.cpp src/worker_session.cpp src/fault_injection.cpp \
          src/publisher_statements.cpp src/commit_prepared.cpp
FREE_SRCS = src/uuid7.cpp src/names.cpp src/route_match.cpp src/partition_calendar.cpp \
            src/sink_options.cpp src/backoff.cpp src/order_guard.cpp src/keyed_hash.cpp src/dispatch.cpp \
            src/sink.cpp src/kafka_sink.cpp src/redis_sink.cpp src/trace_context.cpp \
            src/message_format.cpp src/key_slots.cpp src/fault_points.cpp
OBJS = $(PG_SRCS:.cpp=.o) $(FREE_SRCS:.cpp=.o)

REGRESS = setup emit tracing sinks routes controls stats partitions privileges emit_writes_like_insert extension
REGRESS_OPTS = --inputdir=. --outputdir=test/results
ISOLATION = maintain_never_blocks_emit concurrent_claims_never_overlap emit_follows_concurrent_ddl maintain_keeps_pending_events_at_any_isolation
ISOLATION_OPTS = --inputdir=test/isolation --outputdir=test/results/isolation

PG_CONFIG ?= pg_config

PG_CXXFLAGS = -std=c++17 -Wall -Wextra -Wno-unused-parameter \
              -Wno-missing-field-initializers -Wno-register
ifeq ($(WERROR),1)
PG_CXXFLAGS += -Werror
endif
SHLIB_LINK = -lrdkafka -lhiredis -lstdc++

# Track header dependencies in every build (.deps/): a header change, such as
# a new member in a class another file allocates, must rebuild every file
# that includes it, or the objects disagree about the layout.
override autodepend = yes

# No LLVM bitcode: the JIT never inlines our functions, and this keeps clang
# out of the build requirements.
override with_llvm = no

PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

EXTRA_CLEAN = test/results build
