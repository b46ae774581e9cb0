#pragma once
// The device side of the array-form tree verifiers' tests (tests/cuda/test_verify_*.cu): the output
// arrays in device memory, filled with markers, their views, and their download into the host tests'
// tree_outputs (tests/verify/tree_arrays_util.hpp), which holds the one check against the reference.
#include <cstdint>
#include <span>
#include <vector>

#include "cuda/cuda_test_util.cuh"
#include "specdec/core/device_status.hpp"
#include "verify/tree_arrays_util.hpp"

namespace specdec_test {

//! accepted [N], num_accepted and bonus [R], emitted [N + R] (marker -9) and status [3] (marker 5).
struct device_tree_outputs {
  device_buffer<std::int32_t> acc, nacc, bon, emi, st;
  device_tree_outputs(std::size_t requests, std::size_t nodes)
      : acc(std::vector<std::int32_t>(nodes, -9)), nacc(std::vector<std::int32_t>(requests, -9)),
        bon(std::vector<std::int32_t>(requests, -9)), emi(std::vector<std::int32_t>(nodes + requests, -9)),
        st(std::vector<std::int32_t>{5, 5, 5}) {}
  [[nodiscard]] tree_outputs download() const {
    tree_outputs o;
    o.accepted = acc.download(), o.num_accepted = nacc.download(), o.bonus = bon.download();
    o.emitted = emi.download(), o.status = st.download();
    return o;
  }
  [[nodiscard]] specdec::device_status status() const {
    const auto v = st.download();
    return specdec::device_status::from(std::span<const std::int32_t, 3>(v.data(), 3));
  }
  //! Markers back (between graph replays).
  void reset() {
    emi.upload(std::vector<std::int32_t>(emi.size(), -9));
    st.upload({4, 4, 4});
  }
};

}  // namespace specdec_test
