"""REHEARSAL STAND-IN, never trn2 evidence: what the stand-in compiler's programs cost a
NeuronCore, as release data (a labelled stand-in release changes one number here:
``neuron_standins/releases/``).

**Device memory outside the allocator.** The Neuron runtime keeps, per NeuronCore, memory
the framework's allocator never sees: the programs' code, their constants, scratchpad, DMA
rings and collectives buffers (aws-neuron-sdk ``neuron-runtime/explore/device-memory.rst``,
mirror 81ce03ae: "model code ... includes a micro-code overhead of 96MB per physical Neuron
Core"; "Scratchpad size requirement for a NEFF is specified entirely by the compiler"; the
runtime allocates one shared scratchpad per core, the size of the largest loaded NEFF's).
The driver counts them per core under the sysfs category names of
``tools/neuron-sys-tools/neuron-sysfs-user-guide.rst`` (``device_mem/<category>``).

``DEVICE_MEMORY`` is bytes of one logical core of a real trn2 (24 GiB at LNC=2:
``CORE_BYTES``) once the run's programs are loaded. model_code is the documented microcode
(96 MB per physical core, two per logical core at LNC=2) and nothing more; every other
number is ASSUMED (no public figure for a training NEFF's constants, scratchpad, rings or
collectives buffers was found): plausible shares of a core, not measurements. The stand-in
runtime (``torch_neuronx._sysfs``) scales each to its own core (the same share of its
per-core cap as of a real core), so a rehearsal's tiny model sees the proportions, not the
bytes.

**Compile time.** ``COMPILE_SECONDS_PER_GRAPH``: what the stand-in compile of one graph
takes on a cache miss (the real neuronx-cc takes minutes for a large graph; ASSUMED, scaled
down like the model), so a compiler release that compiles slower has a first step that is
slower on a cold cache and equal on a warm one.
"""

CORE_BYTES = 24 << 30  # a trn2 logical core at LNC=2 (logical-neuroncore-config.rst: 24 GB HBM per 2 physical cores)
MIB = 1 << 20

DEVICE_MEMORY = {
    "model_code": 2 * 96 * MIB,  # device-memory.rst: 96 MB micro-code per physical core, 2 at LNC=2
    "constants": 64 * MIB,  # ASSUMED
    "model_shared_scratchpad": 1024 * MIB,  # ASSUMED: the largest loaded NEFF's scratchpad
    "dma_rings": 256 * MIB,  # ASSUMED
    "collectives": 512 * MIB,  # ASSUMED
}

COMPILE_SECONDS_PER_GRAPH = 0.5  # ASSUMED
