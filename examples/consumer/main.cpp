// The smallest host of ember: load a model, stream a few tokens of a reply.
//   consumer MODEL.gguf [PROMPT]
#include <cstdio>
#include <string>

#include <ember/ember.hpp>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: consumer MODEL.gguf [PROMPT]\n");
    return 2;
  }
  const std::string prompt = argc > 2 ? argv[2] : "The sky is";
  try {
    auto model = ember::Model::load(argv[1], {.threads = 2});
    auto session = model->new_session({.kv = {.max_tokens = 256}});
    ember::Sampler sampler({.temperature = 0.0f});
    std::printf("ember %s, model %s\n%s", ember::version_string(), model->info().architecture.c_str(), prompt.c_str());
    const auto result = session->generate(prompt, sampler, {.max_tokens = 8, .stop_at_end_of_generation = false},
                                          [](std::string_view piece) {
                                            std::fwrite(piece.data(), 1, piece.size(), stdout);
                                            return ember::Continue;
                                          });
    std::printf("\n[%d tokens]\n", result.metrics.generated_tokens);
    return result.metrics.generated_tokens == 8 ? 0 : 1;
  } catch (const ember::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
