# Builds liballoclab.so and the C tests from the one source list in csrc/SOURCES.
#   make                 library (build/release/liballoclab.so)
#   make test            C unit and stress tests
#   make test SAN=asan   the same under AddressSanitizer + UBSan
#   make test SAN=tsan   the same under ThreadSanitizer
#   WERROR=1             warnings are errors (CI)
# The C tests and the sanitizer builds are assert builds (DEBUGFLAGS below);
# the release library (`make`, setup.py) is not.
CC ?= cc
SRCS := $(shell grep -v '^\#' csrc/SOURCES)
VERSION := $(shell sed -n 's/^__version__ = "\(.*\)"/\1/p' python/alloclab/_version.py)
SAN ?=
WERROR ?= 0
BUILD := build/$(if $(SAN),$(SAN),release)

# The flag sets (common, release, werror, preload) come from csrc/CFLAGS,
# which setup.py reads too; $(call cflags,SET) is one set's flags.
cflags = $(shell sed -n 's/^$(1):[[:space:]]*//p' csrc/CFLAGS)
CFLAGS_COMMON := $(call cflags,common) -Icsrc/include -DAL_VERSION_STR=\"$(VERSION)\"
ifeq ($(WERROR),1)
CFLAGS_COMMON += $(call cflags,werror)
endif
ifeq ($(SAN),asan)
SANFLAGS := -O1 -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
else ifeq ($(SAN),tsan)
SANFLAGS := -O1 -fsanitize=thread
else
SANFLAGS := $(call cflags,release)
endif
# The debug tier (csrc/include/alloclab/debug.h): assertions on alloclab's
# invariants and lock rules. The sanitizer builds always have it; without SAN
# the release objects (build/release, measured) are built with AL_DEBUG=0 and
# the C tests link a second set built with it (build/debug).
DEBUGFLAGS := -DAL_DEBUG=2
ALL_CFLAGS := $(CFLAGS_COMMON) $(SANFLAGS) -DAL_BUILD_FLAGS="\"$(CC) $(SANFLAGS)\"" \
	$(if $(SAN),$(DEBUGFLAGS)) $(CFLAGS)
TBUILD := $(if $(SAN),$(BUILD),build/debug)
TEST_CFLAGS := $(ALL_CFLAGS) $(if $(SAN),,$(DEBUGFLAGS))

OBJS := $(SRCS:%.c=$(BUILD)/%.o)
TEST_OBJS := $(SRCS:%.c=$(TBUILD)/%.o)
TEST_SRCS := $(wildcard tests/c/test_*.c)
TEST_BINS := $(TEST_SRCS:tests/c/%.c=$(TBUILD)/tests/%)
HDRS := $(wildcard csrc/include/alloclab/*.h)
INTERNAL_HDRS := $(wildcard csrc/*/*.h)

all: $(BUILD)/liballoclab.so $(BUILD)/liballoclab-preload.so

# V=1 shows the full command lines.
Q := $(if $(V),,@)

$(BUILD)/%.o: %.c $(HDRS) $(INTERNAL_HDRS) Makefile csrc/CFLAGS
	@mkdir -p $(dir $@)
	@echo "  CC    $<  [$(if $(SAN),$(SAN),release)]"
	$(Q)$(CC) $(ALL_CFLAGS) -c $< -o $@

ifeq ($(SAN),)
build/debug/%.o: %.c $(HDRS) $(INTERNAL_HDRS) Makefile csrc/CFLAGS
	@mkdir -p $(dir $@)
	@echo "  CC    $<  [debug]"
	$(Q)$(CC) $(TEST_CFLAGS) -c $< -o $@
endif

$(BUILD)/liballoclab.so: $(OBJS)
	@echo "  LD    $@"
	$(Q)$(CC) $(ALL_CFLAGS) -shared -Wl,-soname,liballoclab.so -o $@ $(OBJS) -lm

# The LD_PRELOAD shim: the library again with its API hidden, plus csrc/preload.
PRELOAD_OBJS := $(patsubst %.c,$(BUILD)/preload-objs/%.o,$(SRCS) csrc/preload/preload.c csrc/preload/record.c)

$(BUILD)/preload-objs/%.o: %.c $(HDRS) $(INTERNAL_HDRS) Makefile csrc/CFLAGS
	@mkdir -p $(dir $@)
	@echo "  CC    $<  [$(if $(SAN),$(SAN),release), preload]"
	$(Q)$(CC) $(ALL_CFLAGS) $(call cflags,preload) -c $< -o $@

$(BUILD)/liballoclab-preload.so: $(PRELOAD_OBJS)
	@echo "  LD    $@"
	$(Q)$(CC) $(ALL_CFLAGS) -shared -Wl,-soname,liballoclab-preload.so -o $@ $(PRELOAD_OBJS) -lm -ldl

preload: $(BUILD)/liballoclab-preload.so

$(TBUILD)/tests/%: tests/c/%.c tests/c/test.h $(TEST_OBJS)
	@mkdir -p $(dir $@)
	@echo "  LD    $@"
	$(Q)$(CC) $(TEST_CFLAGS) -Itests/c -o $@ $< $(TEST_OBJS) -lm

tests: $(TEST_BINS)

# Objects built only for the tests are kept between runs, not intermediates.
.SECONDARY: $(TEST_OBJS)

test: $(TEST_BINS)
	@set -e; for t in $(TEST_BINS); do echo "== $$t"; $$t; done

format:
	clang-format -i $(SRCS) csrc/preload/*.c $(HDRS) $(INTERNAL_HDRS) tests/c/*.c tests/c/*.h \
		examples/plugins/*.c

clean:
	rm -rf build

.PHONY: all tests test format clean preload

# libFuzzer targets: clang with ASan + UBSan, one per layer family,
# all from tests/fuzz/fuzz_alloc.c (see the README's "Fuzzing").
FUZZ_CC ?= clang
FUZZ_FAMILIES := buddy front slab pages
FUZZ_CFLAGS := $(CFLAGS_COMMON) -O1 -DAL_BUILD_FLAGS="\"$(FUZZ_CC) fuzz\"" \
	-fsanitize=address,undefined -fno-sanitize-recover=undefined $(DEBUGFLAGS)
FUZZ_OBJS := $(SRCS:%.c=build/fuzz/%.o)

build/fuzz/%.o: %.c $(HDRS) $(INTERNAL_HDRS)
	@mkdir -p $(dir $@)
	@echo "  CC    $<  [fuzz]"
	$(Q)$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -c $< -o $@

build/fuzz/fuzz_%: tests/fuzz/fuzz_alloc.c $(FUZZ_OBJS)
	@echo "  LD    $@"
	$(Q)$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer -DFUZZ_FAMILY_$* $< $(FUZZ_OBJS) -o $@ -lm

fuzz: $(FUZZ_FAMILIES:%=build/fuzz/fuzz_%)

.PHONY: fuzz
