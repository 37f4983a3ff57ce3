// The terminal of `lotus-bpf top`: on a terminal, the alternate screen and keys read one at a time without echo
// (Ctrl-C still interrupts); both restored when the object goes, on every exit path. Not on a terminal, frames
// are printed one after the other.
#pragma once
#include <termios.h>

#include <cstddef>
#include <string>

namespace lotus::cli {

class LiveScreen {
public:
    LiveScreen();
    ~LiveScreen();
    LiveScreen(const LiveScreen&) = delete;
    LiveScreen& operator=(const LiveScreen&) = delete;

    void draw(const std::string& frame);
    bool quit_pressed(); // 'q' or 'Q' typed since the last call
    size_t width() const;
    size_t height() const;

private:
    bool screen_ = false, keys_ = false;
    termios saved_{};
};

} // namespace lotus::cli
