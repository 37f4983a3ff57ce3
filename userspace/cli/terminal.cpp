#include "terminal.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cstdio>

#include "common/printable.h"

namespace lotus::cli {

LiveScreen::LiveScreen()
{
    screen_ = isatty(STDOUT_FILENO);
    if (isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &saved_) == 0) {
        termios raw = saved_;
        raw.c_lflag &= static_cast<tcflag_t>(~(ICANON | ECHO)); // ISIG kept: Ctrl-C is SIGINT
        raw.c_cc[VMIN] = 0;
        raw.c_cc[VTIME] = 0;
        keys_ = tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0;
    }
    if (screen_) {
        fputs("\033[?1049h\033[?25l", stdout); // alternate screen, cursor hidden
        fflush(stdout);
    }
}

LiveScreen::~LiveScreen()
{
    if (screen_) {
        fputs("\033[?25h\033[?1049l", stdout);
        fflush(stdout);
    }
    if (keys_)
        tcsetattr(STDIN_FILENO, TCSANOW, &saved_);
}

void LiveScreen::draw(const std::string& raw)
{
    // The frame quotes names the target chose: the only control characters that reach the terminal are ours.
    std::string frame = common::printable_lines(raw);
    if (screen_) {
        std::string out = "\033[H";
        for (size_t at = 0; at < frame.size();) { // each line cleared to its end: no leftovers of a longer one
            size_t nl = frame.find('\n', at);
            if (nl == std::string::npos)
                nl = frame.size();
            out.append(frame, at, nl - at);
            out += "\033[K\n";
            at = nl + 1;
        }
        out += "\033[J";
        fwrite(out.data(), 1, out.size(), stdout);
    } else {
        fwrite(frame.data(), 1, frame.size(), stdout);
        fputs("\n", stdout);
    }
    fflush(stdout);
}

bool LiveScreen::quit_pressed()
{
    if (!keys_)
        return false;
    bool quit = false;
    pollfd p{STDIN_FILENO, POLLIN, 0};
    while (poll(&p, 1, 0) > 0 && (p.revents & POLLIN)) {
        char buf[64];
        ssize_t n = read(STDIN_FILENO, buf, sizeof(buf));
        if (n <= 0)
            break;
        for (ssize_t i = 0; i < n; i++)
            quit |= buf[i] == 'q' || buf[i] == 'Q';
    }
    return quit;
}

size_t LiveScreen::width() const
{
    winsize ws{};
    return screen_ && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col ? ws.ws_col : 120;
}

size_t LiveScreen::height() const
{
    winsize ws{};
    return screen_ && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row ? ws.ws_row - 1 : 200;
}

} // namespace lotus::cli
