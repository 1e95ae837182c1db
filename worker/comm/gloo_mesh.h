// weft comm: Gloo full meshes connected through weft's store with one record
// and one batched read per rank (docs/scale.md, "Rendezvous store").
// defines: connect_full_meshes, mesh_key_prefix
//
// Gloo's own connectFullMesh has every rank publish the addresses of all its
// N-1 pairs under one key and read every peer's whole key, one request each:
// N^2 requests and O(N^3) bytes per mesh. Here every rank publishes one
// record per group for all its lanes: the address its pairs share and one
// u16 port per (peer, lane) (this Gloo listens on a socket per pair), and
// reads from every peer, in one gather_column request of O(1) bytes, only the
// header and its own ports: 2N requests and O(N^2) bytes per group (docs/scale.md has the constants).
//
// Invariant: the pairs of one device listen on one address (checked).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <gloo/context.h>
#include <gloo/transport/device.h>

namespace weft::comm {

class TcpStore;

// The key space of one group: its name, size and a hash of its member list
// (two dp groups of one name, one per sequence slice, must not share keys;
// the members themselves would make every key O(N) bytes).
std::string mesh_key_prefix(const std::string& name, const std::vector<int>& members);

// Connects `lanes` full-mesh contexts of rank `rank` in a group of `size`
// through `store` under `prefix`: one set and one multi_get per rank, then
// Gloo's pair connections. Throws RendezvousError when the store times out,
// CommError when the device breaks the invariant above.
std::vector<std::shared_ptr<gloo::Context>> connect_full_meshes(
    TcpStore& store, const std::string& prefix, const std::shared_ptr<gloo::transport::Device>& device,
    int rank, int size, int lanes, std::chrono::milliseconds timeout);

}  // namespace weft::comm
