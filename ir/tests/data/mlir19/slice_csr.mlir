// The program behind MLIR19_SLICE in ir/tests/storage_views.rs (MLIR 19.1.7):
// mlir-opt slice_csr.mlir --sparsifier="enable-runtime-library=false" | mlir-cpu-runner -e main
//   -entry-point-result=void -shared-libs=libmlir_c_runner_utils.so,libmlir_runner_utils.so
#CSR = #sparse_tensor.encoding<{ map = (d0, d1) -> (d0 : dense, d1 : compressed) }>
#CSR_SLICE = #sparse_tensor.encoding<{
  map = (d0 : #sparse_tensor<slice(1, 2, 1)>, d1 : #sparse_tensor<slice(1, 3, 2)>) -> (d0 : dense, d1 : compressed)
}>
#CSR_SLICE_DYN = #sparse_tensor.encoding<{
  map = (d0 : #sparse_tensor<slice(?, ?, ?)>, d1 : #sparse_tensor<slice(?, ?, ?)>) -> (d0 : dense, d1 : compressed)
}>
module {
  func.func @main() {
    %c = arith.constant dense<[[1.0, 2.0, 0.0, 3.0, 0.0, 4.0, 5.0],
                               [0.0, 6.0, 0.0, 7.0, 8.0, 0.0, 9.0],
                               [10.0, 0.0, 11.0, 12.0, 0.0, 13.0, 0.0],
                               [0.0, 14.0, 0.0, 0.0, 15.0, 16.0, 0.0]]> : tensor<4x7xf64>
    %s = sparse_tensor.convert %c : tensor<4x7xf64> to tensor<4x7xf64, #CSR>
    sparse_tensor.print %s : tensor<4x7xf64, #CSR>
    %v = tensor.extract_slice %s[1, 1][2, 3][1, 2] : tensor<4x7xf64, #CSR> to tensor<2x3xf64, #CSR_SLICE>
    sparse_tensor.print %v : tensor<2x3xf64, #CSR_SLICE>
    %c1 = arith.constant 1 : index
    %c2 = arith.constant 2 : index
    %c3 = arith.constant 3 : index
    %w = tensor.extract_slice %s[%c1, %c1][%c2, %c3][%c1, %c2] : tensor<4x7xf64, #CSR> to tensor<?x?xf64, #CSR_SLICE_DYN>
    sparse_tensor.print %w : tensor<?x?xf64, #CSR_SLICE_DYN>
    %n = sparse_tensor.number_of_entries %v : tensor<2x3xf64, #CSR_SLICE>
    vector.print %n : index
    %cv = sparse_tensor.convert %v : tensor<2x3xf64, #CSR_SLICE> to tensor<2x3xf64, #CSR>
    sparse_tensor.print %cv : tensor<2x3xf64, #CSR>
    return
  }
}
