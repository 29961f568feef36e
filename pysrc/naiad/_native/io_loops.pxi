# The front end's I/O loops past the first (csrc/http1/io_group.h, io_thread.h).

cdef class IoLoops:
    """Loops 1..N-1 of the front end's C++ I/O engine, each an HttpIo over one of `lane`'s
    mirrors (FastLane.add_mirror) on an IoThread of its own, in one IoGroup with loop 0
    (`loop0`, on the event loop).

    Threads: loop 0's listeners hand each new HTTP connection out round robin; gRPC
    connections stay on loop 0 (their keepalive and age are Python's). Loops 1..N-1 hand
    Python nothing: what needs Python moves to loop 0 (HttpIo::relay_to). Python touches
    loop k >= 1 (`loops[k]`, its lane `lanes[k]`) only between pause(k) and resume(k),
    on the event loop's thread; stop() ends the threads, after which the loops are the
    event loop's alone."""

    cdef CIoGroup* _group
    cdef vector[CIoThread*] _threads
    cdef readonly list loops  # HttpIo, loop 0 first
    cdef readonly list lanes  # FastLane, loop 0's (the manager's) first
    cdef list _paused  # per loop: pauses held (nested calls pause once)

    def __cinit__(self, HttpIo loop0, FastLane lane):
        self._group = new CIoGroup()
        self._group.add(loop0._io[0])
        self.loops = [loop0]
        self.lanes = [lane]
        cdef HttpIo io
        cdef FastLane mirror
        for mirror in lane.mirrors:
            io = HttpIo(mirror, -1)
            io._io.relay_to(loop0._io)
            self._group.add(io._io[0])
            self.loops.append(io)
            self.lanes.append(mirror)
        loop0._io.set_keep_grpc(True)
        self._paused = [0] * len(self.loops)
        cdef CIoThread* thread
        for io in self.loops[1:]:
            thread = new CIoThread(io._io[0], lane._core._core[0], IoHand())
            self._threads.push_back(thread)
        lane.loops = self

    def __dealloc__(self):
        self._stop()
        del self._group

    cdef void _stop(self):
        cdef vector[CIoThread*] threads
        cdef CIoThread* thread
        threads.swap(self._threads)
        with nogil:
            for thread in threads:
                del thread

    def stop(self):
        """Ends loops 1..N-1's threads (after the turn each runs) and closes their
        connections (shutdown: their requests were answered or failed before)."""
        self.lanes[0].loops = None
        self._stop()
        cdef HttpIo io
        for io in self.loops[1:]:
            io._io.close_all()

    @property
    def size(self):
        return len(self.loops)

    def owner_of(self, uint64_t request_id):
        """The loop that answers `request_id`; -1 for a request no loop sent (Python's)."""
        return self._group.owner_of(request_id)

    def pause(self, uint32_t index):
        """Loop `index`'s thread holds between two turns: the caller owns the loop."""
        if index == 0 or self._threads.empty():
            return
        cdef CIoThread* thread = self._threads[index - 1]
        self._paused[index] += 1
        if self._paused[index] == 1:
            with nogil:
                thread.pause()

    def resume(self, uint32_t index):
        if index == 0 or self._threads.empty():
            return
        self._paused[index] -= 1
        if self._paused[index] == 0:
            self._threads[index - 1].resume()

    def each(self, call):
        """`call(loop)` for every loop (HttpIo), each owned meanwhile; their results."""
        out = []
        for index, io in enumerate(self.loops):
            self.pause(index)
            try:
                out.append(call(io))
            finally:
                self.resume(index)
        return out
