// Image folders (data/image_folder.h) without JPEG files: the RandomResizedCrop draw's properties
// (inside the image, torchvision's scale and ratio ranges up to pixel rounding, the fallback, the
// flip near 1/2, a pure function of its inputs), PIL's bilinear resize on hand-made images, and the
// folder scan's order (classes and files sorted as torchvision's ImageFolder, nested folders,
// non-JPEG refusals). The comparison with torchvision itself is tests/e2e/test_image_folder.sh.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"
#include "data/image_folder.h"

namespace baton {
namespace {

TEST(ImageFolder, ResizedCropDrawsStayInTorchvisionsRanges) {
  int flips = 0, draws = 0;
  for (const auto& [h, w] : {std::pair{28, 28}, std::pair{375, 500}, std::pair{600, 64}}) {
    for (int64_t item = 0; item < 2000; ++item) {
      const ResizedCrop r = random_resized_crop_draw(7, item % 3, item, h, w);
      ASSERT_GE(r.top, 0);
      ASSERT_GE(r.left, 0);
      ASSERT_GT(r.height, 0);
      ASSERT_GT(r.width, 0);
      ASSERT_LE(r.top + r.height, h);
      ASSERT_LE(r.left + r.width, w);
      const double ratio = double(r.width) / r.height, scale = double(r.width) * r.height / (double(h) * w);
      if (h == 600) {  // 600×64 (ratio 0.107): often the fallback, the full width at ratio 3/4
        if (r.width == w && r.height == 85) continue;
      }
      // Rounding w and h to pixels moves ratio and area by up to ~1/side.
      const double slack = 1.0 + 2.5 / std::min(r.width, r.height);
      EXPECT_GE(ratio, 0.75 / slack) << h << "x" << w << " item " << item;
      EXPECT_LE(ratio, 4.0 / 3.0 * slack);
      EXPECT_GE(scale, 0.08 / (slack * slack));
      EXPECT_LE(scale, 1.0);
      flips += r.flip;
      ++draws;
    }
  }
  EXPECT_NEAR(double(flips) / draws, 0.5, 0.03);
  const ResizedCrop a = random_resized_crop_draw(7, 1, 5, 100, 80), b = random_resized_crop_draw(7, 1, 5, 100, 80);
  EXPECT_EQ(a.top, b.top);
  EXPECT_EQ(a.left, b.left);
  EXPECT_EQ(a.height, b.height);
  EXPECT_EQ(a.flip, b.flip);
  int same = 0;
  for (int64_t item = 0; item < 100; ++item) {
    const ResizedCrop e0 = random_resized_crop_draw(7, 0, item, 100, 80), e1 = random_resized_crop_draw(7, 1, item, 100, 80);
    same += e0.top == e1.top && e0.left == e1.left && e0.height == e1.height && e0.width == e1.width;
  }
  EXPECT_LT(same, 5) << "a new crop each epoch";
}

Image8 image(int w, int h, int c, auto value) {
  Image8 img{.width = w, .height = h, .channels = c, .pixels = {}};
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int k = 0; k < c; ++k) img.pixels.push_back(static_cast<uint8_t>(value(x, y, k)));
  return img;
}

TEST(ImageFolder, ResizeIsPilsBilinear) {
  const Image8 flat = image(17, 9, 3, [](int, int, int k) { return 40 + 100 * k; });
  for (const auto& [w, h] : {std::pair{5, 4}, std::pair{33, 20}, std::pair{17, 3}}) {
    const Image8 r = resize_bilinear(flat, w, h);
    ASSERT_EQ(r.width, w);
    ASSERT_EQ(r.height, h);
    for (size_t i = 0; i < r.pixels.size(); ++i) EXPECT_EQ(r.pixels[i], 40 + 100 * (i % 3)) << "constant stays";
  }
  // Halving: each output pixel's support is 4 input pixels with weights 1/8, 3/8, 3/8, 1/8.
  const Image8 ramp = image(8, 1, 1, [](int x, int, int) { return 16 * x; });
  const Image8 half = resize_bilinear(ramp, 4, 1);
  // Pixel 0 sees x = 0, 1, 2 with weights 3/8, 3/8, 1/8 renormalised to 3/7, 3/7, 1/7: (0 + 48 + 32) / 7 = 11.43.
  EXPECT_EQ(half.pixels[0], 11);
  EXPECT_EQ(half.pixels[1], 40);  // x = 1..4: (16 + 3·32 + 3·48 + 64) / 8 = 40
  EXPECT_EQ(half.pixels[3], 101);  // PIL 9.4 gives 11, 40, 72, 101
  const Image8 same = resize_bilinear(ramp, 8, 1);
  EXPECT_EQ(same.pixels, ramp.pixels);
}

TEST(ImageFolder, ScanSortsLikeTorchvision) {
  namespace fs = std::filesystem;
  const fs::path root = fs::temp_directory_path() / ("baton_image_folder_" + std::to_string(::getpid()));
  fs::remove_all(root);
  for (const char* f : {"b/2.jpg", "b/10.JPG", "B/x.jpeg", "a/z/1.jpg", "a/0.jpg", "a/notes.txt"}) {
    fs::create_directories((root / f).parent_path());
    std::ofstream(root / f) << "x";
  }
  const ImageFolderIndex idx = ImageFolderIndex::scan(root.string());
  EXPECT_EQ(idx.classes, (std::vector<std::string>{"B", "a", "b"}));
  std::vector<std::string> rel;
  for (const std::string& f : idx.files) rel.push_back(fs::relative(f, root).string());
  EXPECT_EQ(rel, (std::vector<std::string>{"B/x.jpeg", "a/0.jpg", "a/z/1.jpg", "b/10.JPG", "b/2.jpg"}));
  EXPECT_EQ(idx.labels, (std::vector<int32_t>{0, 1, 1, 2, 2}));
  std::ofstream(root / "b/3.png") << "x";
  EXPECT_THROW(ImageFolderIndex::scan(root.string()), Error);
  fs::remove_all(root);
  EXPECT_THROW(ImageFolderIndex::scan(root.string()), Error);
}

}  // namespace
}  // namespace baton
