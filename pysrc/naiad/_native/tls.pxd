# Declarations of csrc/tls/tls_stream.h: TLS contexts.
from libcpp cimport bool as cbool
from libcpp.string cimport string


cdef extern from "tls/tls_stream.h" namespace "naiad":
    cdef cppclass CTlsContext "naiad::TlsContext":
        CTlsContext(const string& cert, const string& key, const string& root, cbool mutual,
                    const string& alpn) except +
