// What a DataLoader's multiprocessing queue message says, from the first bytes of its pickle (LOTUS_EV_MSG).
// Tasks (main -> worker) are (batch index, sample indices) (or one sample index: batch_size=None); batches (worker -> main) are (batch index, data);
// a persistent worker's new epoch begins with a _ResumeIteration; an IterableDataset's exhausted worker sends
// (index, _IterableDatasetStopIteration). The layout is pickle's (protocol 4+, as ForkingPickler writes it on
// every supported CPython), not the interpreter's: these messages look the same whichever way CPython
// dispatches the Python calls that make them.
#pragma once
#include <cstddef>
#include <cstdint>

#include "model/framework.h"

namespace lotus::model {

struct QueueMessage {
    enum Kind { Other, Indexed, Resume } kind = Other;
    int64_t index = -1; // Indexed: the tuple's first item
    bool stop = false;  // Indexed: its second item is an _IterableDatasetStopIteration
    bool task = false;  // Indexed: its second item is a list of ints or Nones, None or an int: a task's sample indices
};

// data: the pickle's first n bytes (from its PROTO opcode); fw: the worker module's globals.
QueueMessage parse_queue_message(const uint8_t* data, size_t n, const framework::Framework& fw = framework::builtin());

} // namespace lotus::model
