export { writeGguf, GgufWriteError } from "./gguf-writer.ts";
export type { GgufTensor, GgufValue } from "./gguf-writer.ts";
export { tinyLlamaGguf, TINY_LLAMA, TINY_LLAMA_CHAT_TEMPLATE } from "./tiny-llama.ts";
export type { TinyLlamaOptions } from "./tiny-llama.ts";
export {
  NODE_LLAMA_CPP_VERSION,
  LLAMA_SERVER_SCRIPT,
  LlamaServerMissingError,
  llamaServerPath,
  findLlamaServer,
  startLlamaServer,
} from "./llama-server.ts";
export type { StartLlamaServerOptions } from "./llama-server.ts";
