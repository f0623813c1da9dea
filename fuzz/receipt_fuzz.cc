// Receipts (server/service/receipt.h): the input is a payload, which the target signs with a
// fixed secret as sluiced would, so that every input gets past the signature to the decoder,
// whose bounds are what a hostile token cannot otherwise reach. It must refuse, never read
// outside the payload, overflow or allocate what a length claims; what it accepts must sign
// back to the very same token (one encoding per receipt). The raw bytes are also tried as a
// token, unsigned: the shape checks before the signature.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "absl/strings/escaping.h"
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "server/service/receipt.h"

namespace {

const std::string kSecret = "fuzz-secret-0123456789abcdef-0123456789";

std::string Base64Url(std::string_view bytes) {
  return absl::WebSafeBase64Escape(absl::string_view(bytes.data(), bytes.size()));
}

std::string SignPayload(std::string_view payload) {
  std::string token = "r1." + Base64Url(payload);
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  HMAC(EVP_sha256(), kSecret.data(), static_cast<int>(kSecret.size()),
       reinterpret_cast<const unsigned char*>(token.data()), token.size(), mac, &size);
  return token + "." + Base64Url(std::string_view(reinterpret_cast<const char*>(mac), size));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sluice;
  using namespace sluice::server;
  static const ReceiptSigner kSigner = *ReceiptSigner::Create(kSecret);
  const Timestamp now(Micros(1'700'000'000'000'000));
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);

  (void)kSigner.Verify(bytes, now);

  const std::string token = SignPayload(bytes);
  // Any expiry is accepted at the earliest time, so that what decodes is also re-signed.
  const absl::StatusOr<Receipt> receipt = kSigner.Verify(token, Timestamp(Micros(INT64_MIN)));
  if (receipt.ok() && kSigner.Sign(*receipt) != token) {
    std::abort();  // Two encodings of one receipt: a token could be respelled.
  }
  return 0;
}
