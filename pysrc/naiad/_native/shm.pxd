# Declarations of csrc/shm/shm_registry.h, csrc/shm/shm_fault_guard.h, csrc/codec/kserve_codec.h:
# shared-memory regions: the registry, its region table, the fault guard.
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t
from libcpp cimport bool as cbool
from libcpp.string cimport string
from libcpp.string_view cimport string_view
from libcpp.vector cimport vector
from naiad._native.request cimport *
from naiad._native.ipc cimport *
from naiad._native.core cimport *


cdef extern from "shm/shm_registry.h" namespace "naiad":
    string truncated_in_use_message(string_view region_name) except +
    string output_too_small_message(string_view output_name, uint64_t region_size,
                                    uint64_t needed)
    cdef cppclass RegionStatus:
        string name
        InputKind kind
        string key
        uint64_t offset
        uint64_t byte_size
        int64_t device_id
        string raw_handle

    cdef cppclass CRegionRef "naiad::RegionRef":
        uint64_t id
        InputKind kind
        uint8_t* data
        int fd
        uint64_t object_offset
        uint64_t size
        uint64_t region_offset
        uint64_t region_size
        int64_t device_id
        string raw_handle

    cdef cppclass CShmRegistry "naiad::ShmRegistry":
        CShmRegistry(Arena* arena, uint32_t max_regions) except +
        uint64_t table_offset()
        ErrorKind register_system(string_view name, string_view key, uint64_t offset,
                                  uint64_t byte_size, string* error) except +
        ErrorKind register_cuda(string_view name, string_view raw_handle, int64_t device_id,
                                uint64_t byte_size, string* error) except +
        ErrorKind unregister(InputKind kind, string_view name, string* error) except +
        ErrorKind status(InputKind kind, string_view name, vector[RegionStatus]* out,
                         string* error) except +
        ErrorKind resolve(string_view name, uint64_t offset, uint64_t size, CRegionRef* ref,
                          string* error) except +
        void release(uint64_t id)
        size_t mapped()
        uint64_t copies()
        uint64_t copied_bytes()
        cbool write(uint64_t region, uint64_t offset, const uint8_t* data, uint64_t size) nogil
        string write_output(uint64_t region, uint64_t offset, uint64_t place_size,
                            string_view output_name, const uint8_t* data, uint64_t size) nogil
        string truncated(const vector[uint64_t]& ids) except +

    void attach_registry(CCore& core, CShmRegistry* registry)
    uint64_t gathered_bytes(CCore& core)
    uint64_t in_place_inputs(CCore& core)
    size_t kCudaIpcHandleBytes
    uint32_t kDefaultMaxRegions
    cdef struct RegionTableSlot:  # its id is an atomic: read through region_table_id
        int64_t fd
        uint64_t object_offset
        uint64_t byte_size
    cdef struct RegionTable:
        uint64_t frontend_pid
        uint64_t slots
    size_t region_table_bytes(uint64_t slots)
    const RegionTableSlot* region_table_slot(const RegionTable* table, uint64_t slot)
    uint64_t region_table_epoch_of(const RegionTable* table)
    uint64_t region_table_id(const RegionTable* table, uint64_t slot)


cdef extern from "shm/shm_fault_guard.h" namespace "naiad":
    int shm_guard_watch(void* base, size_t length, cbool writable)
    void shm_guard_unwatch(int handle)
    uint64_t shm_guard_faults(int handle)


cdef extern from "codec/kserve_codec.h" namespace "naiad":
    cdef cppclass KServeCodecShm "naiad::KServeCodec":
        void set_regions(CShmRegistry* regions)
