#pragma once
// `axonn data prepare`'s progress on stderr: documents, tokens, MB/s, percent and ETA.
// On a terminal one line redrawn in place at most 4 times a second; elsewhere (a batch job's
// log) a line every 30 s, so a log shows a long run is alive without filling with redraws.
#include <string>

#include "runner/prepare/prepare_pipeline.hpp"

namespace axonn {

// "12,345 documents, 3.46M tokens, 12.3 MB/s, 45%, ETA 0:01:12"
std::string format_progress(const PrepareProgress& p);

class ProgressLine {
 public:
  // `terminal`: redraw in place (stderr is a TTY).
  explicit ProgressLine(bool terminal) : terminal_(terminal) {}
  void show(const PrepareProgress& p);
  // Ends the in-place line, if one was drawn.
  void done();

 private:
  bool terminal_;
  bool drawn_ = false;
  double last_seconds_ = -1e9;
};

}  // namespace axonn
