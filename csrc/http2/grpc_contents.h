// Typed contents of a ModelInferRequest input (inference.InferTensorContents) as the
// tensor's wire bytes (little-endian elements; BYTES as u32 length + bytes each), with
// Triton 2.51's checks and messages (InferGRPCToInput): the field must be the one of the
// input's datatype (int_contents carries INT8/INT16/INT32, uint_contents UINT8/16/32,
// each element cut to its low bytes as Triton does), and only one field may hold values.
// The element count against the shape is the validator's check, as in Triton.
//
// Pure functions over caller-owned bytes; any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace naiad::grpc {

// True when `contents` (the bytes of an InferTensorContents message) is well formed: each
// known field with a wire type protobuf accepts for it (a repeated scalar packed or not)
// read, unknown fields and known ones of another wire type skippable. The reader
// (grpc_infer_message.h) refuses a message without.
bool contents_well_formed(std::string_view contents);

// Appends the wire bytes of an input's typed contents (`chunks`: every occurrence of the
// `contents` field in the input, merged as protobuf merges them) to `out`. False with
// `error` set to Triton's message (INVALID_ARGUMENT) when the contents do not fit the
// input's `datatype`. `chunks` must be well formed (contents_well_formed). Contents with
// no values give no bytes (the validator then names the size).
bool contents_to_wire(const std::vector<std::string_view>& chunks, std::string_view datatype,
                      std::string_view input_name, std::string_view model_name,
                      std::vector<uint8_t>* out, std::string* error);

// Triton's name of a datatype given as text (TRITONSERVER_DataTypeString of
// TRITONSERVER_StringToDataType): the name itself, or "<invalid>" for one it does not know.
std::string_view triton_datatype_name(std::string_view datatype);

}  // namespace naiad::grpc
