// LineSplitter: turns the byte chunks of a watch stream into complete
// newline-terminated lines. Chunk boundaries carry no meaning on the wire (a
// JSON event may span chunks, a chunk may hold several events), so nothing
// is parsed until a line is complete. Invariant: pending() holds at most one
// partial line.
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace weft::kube {

class LineSplitter {
 public:
  // Calls on_line for every line completed by `chunk` (without the '\n').
  // Returns false as soon as on_line returns false (the rest is dropped).
  bool feed(std::string_view chunk, const std::function<bool(std::string_view)>& on_line) {
    size_t start = 0;
    for (size_t i = 0; i < chunk.size(); ++i) {
      if (chunk[i] != '\n') continue;
      std::string_view piece = chunk.substr(start, i - start);
      start = i + 1;
      bool keep_going;
      if (pending_.empty()) {
        keep_going = piece.empty() || on_line(piece);
      } else {
        pending_.append(piece);
        std::string line;
        line.swap(pending_);
        keep_going = on_line(line);
      }
      if (!keep_going) return false;
    }
    pending_.append(chunk.substr(start));
    return true;
  }
  const std::string& pending() const { return pending_; }

 private:
  std::string pending_;
};

}  // namespace weft::kube
