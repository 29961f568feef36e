# Declarations of csrc/tls/tls_stream.h: TLS contexts.
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libcpp cimport bool as cbool
from libcpp.memory cimport shared_ptr
from libcpp.pair cimport pair
from libcpp.string cimport string
from libcpp.string_view cimport string_view
from libcpp.vector cimport vector


cdef extern from "tls/tls_stream.h" namespace "naiad":
    cdef cppclass CTlsContext "naiad::TlsContext":
        CTlsContext(const string& cert, const string& key, const string& root, cbool mutual,
                    const string& alpn) except +
