// What stat(2) says of a file, to notice that it changed: rewritten in place,
// replaced by a rename, or swapped behind a symlink (as Kubernetes updates a mounted
// Secret). The security files (token file, TLS certificates) are re-read when their
// stamp moves, so rotating them needs no restart.
#ifndef LAYERSERVE_COMMON_FILE_STAMP_H_
#define LAYERSERVE_COMMON_FILE_STAMP_H_

#include <sys/stat.h>

#include <cstdint>
#include <string>

namespace layerserve {

struct FileStamp {
  bool exists = false;
  uint64_t device = 0, inode = 0;
  int64_t size = 0, modified_ns = 0;

  bool operator==(const FileStamp& other) const {
    return exists == other.exists && device == other.device && inode == other.inode &&
           size == other.size && modified_ns == other.modified_ns;
  }
  bool operator!=(const FileStamp& other) const { return !(*this == other); }
};

// The stamp of the file `path` names (following symlinks); exists is false when it
// cannot be stat'ed. An empty path gives the same stamp every time.
inline FileStamp StampOf(const std::string& path) {
  FileStamp stamp;
  struct stat s;
  if (path.empty() || ::stat(path.c_str(), &s) != 0) return stamp;
  stamp.exists = true;
  stamp.device = s.st_dev;
  stamp.inode = s.st_ino;
  stamp.size = s.st_size;
  stamp.modified_ns = int64_t{s.st_mtim.tv_sec} * 1000000000 + s.st_mtim.tv_nsec;
  return stamp;
}

}  // namespace layerserve

#endif  // LAYERSERVE_COMMON_FILE_STAMP_H_
